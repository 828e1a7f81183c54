#!/usr/bin/env bash
# The test command: set-up, fetch the model, build, run the whole suite.
# Under CI=true a missing model or text is a test failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch-models.sh
scripts/build.sh
# The CUDA backend must compile wherever nvcc is (no GPU needed; its GPU tests skip here and run
# on a machine with one: QT_REQUIRE_GPU=1 build-cuda/test_cuda).
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  scripts/build_cuda.sh
  QT_BIN=build-cuda/quanttool build-cuda/test_cuda --gtest_brief=1
fi
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
