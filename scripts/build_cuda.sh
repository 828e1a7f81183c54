#!/usr/bin/env bash
# Configure and build the CUDA backend (-DQT_CUDA=ON) into build-cuda/: the quanttool binary and
# the GPU tests (test_cuda: tests/test_cuda*.cpp), nothing else. Needs nvcc (PATH or /usr/local/cuda); no GPU.
# Usage: scripts/build_cuda.sh [JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "error: no nvcc (PATH or /usr/local/cuda/bin)" >&2; exit 2; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
[ -f build-cuda/CMakeCache.txt ] && gen=()
cmake -S . -B build-cuda "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DQT_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
  "${launcher[@]}" >/dev/null
cmake --build build-cuda -j"${1:-$(nproc)}" --target quanttool test_cuda
