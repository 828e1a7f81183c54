#!/usr/bin/env bash
# On the device machine: the GPU tests (TinyLlamaW4A8MatchesCpu among them),
# decode-mode KV windows (banded, attention.h) side by side with f16 at ctx 4096, SmolLM2 W4A8
# parity and speed, W8A8 on the 8B shape.
# Kit K (carried under a git-ignored folder of the checkout): quanttool.xz, test_cuda.xz (stripped),
# lib.tar.xz (libfmt, libpcre2-8, libgomp, libopenblas, libgfortran, libquadmath from `ldd`),
# tok/ (SmolLM2's tokenizer, from `quanttool convert --in SmolLM2.gguf --out DIR`), and per call
# at most one part of the SmolLM2 GGUF (model.part.*, `split -b`; kept in /tmp/parts while warm).
# Usage, from the repository root on the device: QT_BUILD_SRC=DIR bash K/scripts/device_cuda3.sh K STEP
#   tests  — unpack, the GPU tests (QT_REQUIRE_GPU=1), bench --peak
#   kvrand — SmolLM2-shaped random checkpoint (made here): f16 vs kivi decode at ctx 4096
#   part   — keep K's part in /tmp/parts;  8b — the 8B shape: bf16, W8A8, profiles
#   smol   — the real SmolLM2 (parts): W4A8/W8A8 CPU vs GPU at 64 chunks, full text, KV decode at ctx 4096
set -o pipefail
K=$(cd "$1" && pwd); STEP=$2; R=$PWD
T=$R/data/wikitext-2/wiki.test.raw
[ -n "${QT_BUILD_SRC:-}" ] || { echo "error: set QT_BUILD_SRC to the folder the kit's binaries were built in" >&2; exit 2; }
mkdir -p "$(dirname "$QT_BUILD_SRC")" && ln -sfn "$R" "$QT_BUILD_SRC"  # QT_SOURCE_DIR of the build: tests/golden, data
if [ ! -x /tmp/kit/quanttool ] || [ "$K/quanttool.xz" -nt /tmp/kit/stamp ]; then
  mkdir -p /tmp/kit && for b in quanttool test_cuda; do [ -f "$K/$b.xz" ] && xz -dc "$K/$b.xz" > /tmp/kit/$b && chmod +x /tmp/kit/$b; done
  [ -f "$K/lib.tar.xz" ] && tar -xJf "$K/lib.tar.xz" -C /tmp/kit
  [ -d "$K/tok" ] && cp -r "$K/tok" /tmp/kit/
  cp "$0" /tmp/kit/device_cuda3.sh; touch /tmp/kit/stamp
fi
CUBLAS_PY=$(python3 -c "import nvidia.cublas,os;print(os.path.dirname(nvidia.cublas.__file__)+'/lib')" 2>/dev/null)
export LD_LIBRARY_PATH=/tmp/kit/lib:/usr/local/cuda/lib64:$CUBLAS_PY
Q=/tmp/kit/quanttool
mkdir -p /tmp/parts && cp "$K"/model.part.* /tmp/parts/ 2>/dev/null
run() {  # one command: its summary lines and whole-process wall time
  local t0=$EPOCHREALTIME; timeout 300 "$@" > /tmp/last.txt 2>&1; local rc=$?; local t1=$EPOCHREALTIME
  grep -E "^PPL|^tokens/s|^kv cache|^error|^internal|^cuda stage|^  |^eval|^weights|^method" /tmp/last.txt
  echo "rc=$rc whole-process $(python3 -c "print(f'{$t1-$t0:.2f}')") s: ${*#$Q }"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nvidia-smi | grep -o "CUDA Version: [0-9.]*"
model() {
  M=/tmp/model.gguf
  [ -f $M ] || cat /tmp/parts/model.part.* > $M
  echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $M" | sha256sum -c || exit 1
}
kvside() {  # $1 model: f16 vs the decode windows at ctx 4096, f16 again; profiles
  for a in "--kv f16" "--kv kivi:bits=2 --kv-mode decode" \
           "--kv affine:bits=4,r=64 --kv-mode decode" "--kv turboquant_mse:bits=3,r=64 --kv-mode decode" \
           "--kv kivi:bits=2" "--kv f16" "--kv kivi:bits=2 --kv-mode decode"; do
    run $Q eval-ppl --model $1 --text $T --ctx 4096 --device cuda $a
  done
  run env QT_CUDA_PROFILE=1 $Q eval-ppl --model $1 --text $T --ctx 4096 --device cuda --kv f16
  run env QT_CUDA_PROFILE=1 $Q eval-ppl --model $1 --text $T --ctx 4096 --device cuda --kv kivi:bits=2 --kv-mode decode
}
case $STEP in
  tests)
    QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 400 /tmp/kit/test_cuda 2>&1 | grep -vE "^\[ RUN|^$"
    $Q bench --peak --device cuda 2>&1 | tail -4 ;;
  kvrand)
    [ -d /tmp/smolr ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from /tmp/kit/tok --out /tmp/smolr > /dev/null
    kvside /tmp/smolr ;;
  part) ls -la /tmp/parts ;;
  8b)
    [ -d /tmp/l8b ] || python3 $R/scripts/make_test_checkpoint.py --shape llama3-8b --tokenizer-from /tmp/kit/tok --out /tmp/l8b > /dev/null
    [ -d /tmp/l8b-w8 ] || run $Q convert --in /tmp/l8b --out /tmp/l8b-w8 --scheme int8 --group-size 0 --max-shard-size 2GB
    run $Q eval-ppl --model /tmp/l8b --text $T --device cuda
    run $Q eval-ppl --model /tmp/l8b-w8 --text $T --device cuda
    run $Q eval-ppl --model /tmp/l8b-w8 --text $T --device cuda --batch 8
    run $Q eval-ppl --model /tmp/l8b --text $T --device cuda --batch 8
    run $Q eval-ppl --model /tmp/l8b --text $T --device cuda
    run env QT_CUDA_PROFILE=1 $Q eval-ppl --model /tmp/l8b-w8 --text $T --device cuda ;;
  smol)
    model
    run $Q convert --in $M --out /tmp/w4 --scheme int4 --group-size 0
    run $Q convert --in $M --out /tmp/w8 --scheme int8 --group-size 0
    for m in /tmp/w4 /tmp/w8; do
      run $Q eval-ppl --model $m --text $T --chunks 64 --device cuda
      run $Q eval-ppl --model $m --text $T --chunks 64 --compute bf16 --kv f16
      run $Q eval-ppl --model $m --text $T --chunks 64
      run $Q eval-ppl --model $m --text $T --device cuda
    done
    run $Q eval-ppl --model $M --text $T --device cuda
    run $Q eval-ppl --model $M --text $T --chunks 64 --device cuda --kv kivi:bits=2 --kv-mode decode
    run $Q eval-ppl --model $M --text $T --chunks 64 --device cuda --kv affine:bits=4,r=64 --kv-mode decode
    kvside $M ;;
  par2)  # after the int8 head: W4A8 / W8A8 GPU at 64 chunks and full text; the CPU's own spread
         # between its kernel levels (QT_KERNEL_LEVEL=avx2 against the default avx512, same binary)
    model
    [ -d /tmp/w4 ] || run $Q convert --in $M --out /tmp/w4 --scheme int4 --group-size 0
    [ -d /tmp/w8 ] || run $Q convert --in $M --out /tmp/w8 --scheme int8 --group-size 0
    for m in /tmp/w4 /tmp/w8; do
      run $Q eval-ppl --model $m --text $T --chunks 64 --device cuda
      run $Q eval-ppl --model $m --text $T --device cuda
      run $Q eval-ppl --model $m --text $T --chunks 64 --compute bf16 --kv f16
      run env QT_KERNEL_LEVEL=avx2 $Q eval-ppl --model $m --text $T --chunks 64 --compute bf16 --kv f16
      run $Q eval-ppl --model $m --text $T --chunks 64
    done
    run $Q logits --model /tmp/w4 --text $T --tokens 64 --compute bf16 --kv f16 --out /tmp/cpu4.bin
    run $Q logits --model /tmp/w4 --text $T --tokens 64 --compute bf16 --kv f16 --device cuda --out /tmp/gpu4.bin
    python3 -c "import numpy as n;a=n.fromfile('/tmp/cpu4.bin','<f4');b=n.fromfile('/tmp/gpu4.bin','<f4');print('w4a8 logits max|diff|',abs(a-b).max(),'rms',((a-b)**2).mean()**.5,'max|cpu|',abs(a).max())" ;;
  *) echo "usage: $0 KIT tests|kvrand|part|8b|smol|par2" >&2; exit 2 ;;
esac
