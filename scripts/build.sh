#!/usr/bin/env bash
# Configure and build (Release) into build/: every target (the tests too), or only the targets
# named, e.g. `scripts/build.sh quanttool` for the CLI alone.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Ninja where installed (scripts/setup.sh installs it): it compiles a target's objects while the
# libraries it links are still building, so both cores stay busy to the end. A build folder keeps
# the generator it was made with.
generator=()
[ -f build/CMakeCache.txt ] || ! command -v ninja >/dev/null || generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j"$(nproc)" "${targets[@]}"
