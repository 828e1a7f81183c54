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
# CUTLASS (headers only) from PyPI's nvidia-cutlass wheel, once, into the user's cache: the fused
# W8A8 gate|up GEMM with SwiGLU (libquant/cuda/gemm_q8_fused.cu). Without it (offline) that GEMM stays cuBLASLt's.
cutlass_ver=4.2.0.0
cutlass_dir=${XDG_CACHE_HOME:-$HOME/.cache}/quanttool/nvidia-cutlass-$cutlass_ver
if [ ! -f "$cutlass_dir/include/cutlass/cutlass.h" ]; then
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps "nvidia-cutlass==$cutlass_ver" -d "$tmp" >/dev/null 2>&1 &&
    python3 -m zipfile -e "$tmp"/nvidia_cutlass-*.whl "$tmp/w" >/dev/null; then
    mkdir -p "$(dirname "$cutlass_dir")" && rm -rf "$cutlass_dir"
    mv "$tmp/w/cutlass_library/source" "$cutlass_dir"
  else
    echo "warning: no CUTLASS (pip download nvidia-cutlass==$cutlass_ver failed): the W8A8 gate|up GEMM without SwiGLU fused" >&2
    cutlass_dir=
  fi
  rm -rf "$tmp"
fi
cmake -S . -B build-cuda "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DQT_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DQT_CUTLASS_DIR="$cutlass_dir" "${launcher[@]}" >/dev/null
cmake --build build-cuda -j"${1:-$(nproc)}" --target quanttool test_cuda
