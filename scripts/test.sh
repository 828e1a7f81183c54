#!/usr/bin/env bash
# The test command: set-up, fetch the model, build, run the whole suite.
# Under CI=true a missing model or text is a test failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch-models.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
