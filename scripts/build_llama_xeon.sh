#!/usr/bin/env bash
# llama.cpp's llama-perplexity for the device machine's Xeon (Emerald Rapids), built on another x86 host:
# GGML_NATIVE=OFF with the Xeon's ISA named (AVX-512 F/CD/BW/DQ/VL/VBMI, VNNI, BF16, AMX tile/int8/bf16),
# ggml and llama linked statically (the binary needs libgomp, libstdc++ and glibc only).
#
# GCC 12's amxtileintrin.h declares ldtilecfg's memory operand as 8 bytes (`*(const void **)config`),
# so GCC may delete the stores of the tile rows/colsb as dead: ggml's ggml_tile_config_init (ggml-cpu/
# amx/mmq.cpp) then loads palette 1 with every tile 0 × 0 and its first TILEZERO raises #UD (SIGILL in
# the AMX Q8_0 path). Built with FIX_AMX_HEADER=1 (default), a copy of the header whose operand is the
# whole 64-byte configuration comes first on the include path; FIX_AMX_HEADER=0 builds the sources as
# the compiler has them.
#
# Usage: scripts/build_llama_xeon.sh LLAMA_CPP_SRC BUILD_DIR   (then BUILD_DIR/bin/llama-perplexity)
set -euo pipefail
[ $# = 2 ] || { echo "error: usage: $0 LLAMA_CPP_SRC BUILD_DIR" >&2; exit 2; }
SRC=$1; B=$2; mkdir -p "$B"
FLAGS=""
if [ "${FIX_AMX_HEADER:-1}" = 1 ]; then
  H=$(echo '#include <immintrin.h>' | ${CXX:-c++} -mamx-tile -x c++ -E -H - 2>&1 >/dev/null | grep -m1 -o '/[^ ]*amxtileintrin.h' || true)
  [ -n "$H" ] || { echo "error: the compiler's amxtileintrin.h not found" >&2; exit 2; }
  mkdir -p "$B/amxfix"
  sed -e 's|"m" (\*((const void \*\*)__config))|"m" (*(const unsigned char (*)[64])__config)|' \
      -e 's|"=m" (\*((void \*\*)__config))|"=m" (*(unsigned char (*)[64])__config)|' "$H" > "$B/amxfix/amxtileintrin.h"
  cmp -s "$H" "$B/amxfix/amxtileintrin.h" && echo "note: $H already takes the whole configuration"
  FLAGS="-I$(cd "$B/amxfix" && pwd)"
fi
cmake -S "$SRC" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
  -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON \
  -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
  -DGGML_AMX_TILE=ON -DGGML_AMX_INT8=ON -DGGML_AMX_BF16=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" > "$B/configure.log"
ninja -C "$B" -j"${JOBS:-2}" llama-perplexity
# The AMX kernels are in the binary: TDPBSSD (ggml's Q8_0/Q4 tiles), LDTILECFG with the rows/colsb stored.
objdump -d --no-show-raw-insn "$B/bin/llama-perplexity" | grep -oE '\b(tdpbssd|tdpbusd|tdpbf16ps|ldtilecfg)\b' | sort | uniq -c
