#!/usr/bin/env bash
# The CUDA backend's measurements on the device machine (docs/cuda.md; figures in
# results/cuda.md), as this session ran them.
# The device has no compiler toolchain for our dependencies (fmt, CLI11, …), so the binaries are
# built here (scripts/build_cuda.sh) and carried: a kit folder K with quanttool, test_cuda, lib/
# (libfmt.so.9, libpcre2-8.so.0, libgomp.so.1, and since GPTQ uses LAPACK libopenblas.so.0,
# libgfortran.so.5, libquadmath.so.0 — `ldd build-cuda/quanttool` lists them — from this machine), tok/ (SmolLM2's tokenizer files,
# from `quanttool convert --in SmolLM2.gguf --out DIR`), src/tests/golden/logits/tiny-llama3, and for
# the real model its GGUF in parts (at most 64 MiB travel per call: model.part.aa/ab/ac, `cat`ed on
# the device; calls back to back so the machine stays warm).
# Usage, from the repository root on the device: QT_BUILD_SRC=DIR bash scripts/device_cuda.sh K STEP
#   STEP tests   — the GPU tests (QT_REQUIRE_GPU=1: a missing GPU fails), bench --peak --device cuda
#        smollm2 — the real SmolLM2 (K/model.gguf, made from the parts): CPU vs GPU PPL at 64 chunks
#                  for bf16, W8A8 and affine4-g64; W8A8's KLD against the model; logits of 64
#                  tokens; the full text; transformers on the same weights as a bf16 folder
#        8b      — the Llama-3-8B-shaped random checkpoint (made here, ~3 min): bf16, W8A8, affine4
#                  full text with stage profiles; scripts/hf_ppl_cuda.py side by side
set -o pipefail
K=$(cd "$1" && pwd); STEP=$2; R=$PWD
T=$R/data/wikitext-2/wiki.test.raw
mkdir -p "$K/src" && ln -sfn "$R/data" "$K/src/data"
[ -n "${QT_BUILD_SRC:-}" ] || { echo "error: set QT_BUILD_SRC to the folder the kit's binaries were built in" >&2; exit 2; }
mkdir -p "$(dirname "$QT_BUILD_SRC")" && ln -sfn "$K/src" "$QT_BUILD_SRC"  # QT_SOURCE_DIR of the build: tests/golden, data
CUBLAS_PY=$(python3 -c "import nvidia.cublas,os;print(os.path.dirname(nvidia.cublas.__file__)+'/lib')" 2>/dev/null)
export LD_LIBRARY_PATH=$K/lib:/usr/local/cuda/lib64:$CUBLAS_PY
Q=$K/quanttool
run() {  # one command: its summary lines and whole-process wall time
  local t0=$EPOCHREALTIME; timeout 300 "$@" > /tmp/last.txt 2>&1; local rc=$?; local t1=$EPOCHREALTIME
  grep -E "^PPL|^tokens/s|^wall|^method|^weights|^error|^internal|position|converted|^cuda stage|^  |transformers |^eval|^tokens " /tmp/last.txt
  echo "rc=$rc whole-process $(python3 -c "print(f'{$t1-$t0:.2f}')") s: $*"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
case $STEP in
  tests)
    QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 120 "$K/test_cuda"
    $Q bench --peak --device cuda ;;
  smollm2)
    M=$K/model.gguf
    echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $M" | sha256sum -c || exit 1
    run $Q convert --in $M --out /tmp/w8 --scheme int8 --group-size 0
    run $Q convert --in $M --out /tmp/a4 --scheme affine --bits 4 --group-size 64
    run $Q convert --in $M --out /tmp/smolhf --dtype bf16
    for m in $M /tmp/w8 /tmp/a4; do
      run $Q eval-ppl --model $m --text $T --chunks 64 --device cuda
      run $Q eval-ppl --model $m --text $T --chunks 64 --compute bf16 --kv f16
      run $Q eval-ppl --model $m --text $T --chunks 64
      run $Q eval-ppl --model $m --text $T --device cuda
    done
    run $Q logits --model $M --text $T --tokens 64 --compute bf16 --kv f16 --out /tmp/cpu.bin
    run $Q logits --model $M --text $T --tokens 64 --compute bf16 --kv f16 --device cuda --out /tmp/gpu.bin
    python3 -c "import numpy as n;a=n.fromfile('/tmp/cpu.bin','<f4');b=n.fromfile('/tmp/gpu.bin','<f4');print('logits max|diff|',abs(a-b).max(),'max|cpu|',abs(a).max())"
    run $Q eval-ppl --model /tmp/w8 --text $T --chunks 64 --device cuda --kl-base-model $M
    run $Q eval-ppl --model /tmp/w8 --text $T --chunks 64 --kv f16 --kl-base-model $M --kl-base-kv f16
    run $Q eval-ppl --model /tmp/smolhf --text $T --device cuda
    run python3 $R/scripts/hf_ppl_cuda.py --model /tmp/smolhf --text $T --batch 64 ;;
  8b)
    [ -d /tmp/l8b ] || python3 $R/scripts/make_test_checkpoint.py --shape llama3-8b --tokenizer-from $K/tok --out /tmp/l8b
    [ -d /tmp/l8b-w8 ] || run $Q convert --in /tmp/l8b --out /tmp/l8b-w8 --scheme int8 --group-size 0 --max-shard-size 2GB
    [ -d /tmp/l8b-a4 ] || run $Q convert --in /tmp/l8b --out /tmp/l8b-a4 --scheme affine --bits 4 --group-size 64 --max-shard-size 2GB
    for m in /tmp/l8b /tmp/l8b-w8 /tmp/l8b-a4; do
      run $Q eval-ppl --model $m --text $T --device cuda
      run $Q eval-ppl --model $m --text $T --device cuda --batch 8
      run env QT_CUDA_PROFILE=1 $Q eval-ppl --model $m --text $T --device cuda
    done
    run python3 $R/scripts/hf_ppl_cuda.py --model /tmp/l8b --text $T --batch 8 ;;
  *) echo "usage: $0 KIT tests|smollm2|8b" >&2; exit 2 ;;
esac
