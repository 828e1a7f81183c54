#!/usr/bin/env bash
# On the device machine: W8A8 (vectorized passes, cuBLASLt's int8 candidates timed at reserve)
# side by side with bf16 on the 8B shape, one call.
# Kit K (carried under a git-ignored folder of the checkout): quanttool.xz, test_cuda.xz (stripped),
# lib.tar.xz (libfmt, libpcre2-8, libgomp, libopenblas, libgfortran, libquadmath from `ldd`),
# tok/ (SmolLM2's tokenizer), scripts/device_cuda4.sh (this file).
# Usage, from the repository root on the device: QT_BUILD_SRC=DIR bash K/scripts/device_cuda4.sh K STEP
#   tests — the GPU tests (QT_REQUIRE_GPU=1), bench --peak
#   8b    — the 8B-shaped checkpoint (made here) and its W8A8 folder; bf16 vs W8A8 at the default
#           batch and --batch 8, profiles
set -o pipefail
K=$(cd "$1" && pwd); STEP=$2; R=$PWD
T=$R/data/wikitext-2/wiki.test.raw
[ -n "${QT_BUILD_SRC:-}" ] || { echo "error: set QT_BUILD_SRC to the folder the kit's binaries were built in" >&2; exit 2; }
mkdir -p "$(dirname "$QT_BUILD_SRC")" && ln -sfn "$R" "$QT_BUILD_SRC"  # QT_SOURCE_DIR of the build: tests/golden, data
if [ ! -x /tmp/kit/quanttool ] || [ "$K/quanttool.xz" -nt /tmp/kit/stamp ]; then
  mkdir -p /tmp/kit && for b in quanttool test_cuda; do [ -f "$K/$b.xz" ] && xz -dc "$K/$b.xz" > /tmp/kit/$b && chmod +x /tmp/kit/$b; done
  [ -f "$K/lib.tar.xz" ] && tar -xJf "$K/lib.tar.xz" -C /tmp/kit
  [ -d "$K/tok" ] && cp -r "$K/tok" /tmp/kit/
  touch /tmp/kit/stamp
fi
CUBLAS_PY=$(python3 -c "import nvidia.cublas,os;print(os.path.dirname(nvidia.cublas.__file__)+'/lib')" 2>/dev/null)
export LD_LIBRARY_PATH=/tmp/kit/lib:/usr/local/cuda/lib64:$CUBLAS_PY
Q=/tmp/kit/quanttool
run() {  # one command: its summary lines and whole-process wall time
  local t0=$EPOCHREALTIME; timeout 300 "$@" > /tmp/last.txt 2>&1; local rc=$?; local t1=$EPOCHREALTIME
  grep -E "^PPL|^tokens/s|^error|^internal|^cuda stage|^  |^method|^lt tune" /tmp/last.txt
  echo "rc=$rc whole-process $(python3 -c "print(f'{$t1-$t0:.2f}')") s: ${*#$Q }"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nvidia-smi | grep -o "CUDA Version: [0-9.]*"
for s in ${STEP//,/ }; do case $s in
  tests)
    QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 300 /tmp/kit/test_cuda 2>&1 | grep -vE "^\[ RUN|^$|^kv attention|^tiny "
    $Q bench --peak --device cuda 2>&1 | tail -4 ;;
  8b)
    [ -d /tmp/l8b ] || python3 $R/scripts/make_test_checkpoint.py --shape llama3-8b --tokenizer-from /tmp/kit/tok --out /tmp/l8b > /dev/null
    [ -d /tmp/l8b-w8 ] || run $Q convert --in /tmp/l8b --out /tmp/l8b-w8 --scheme int8 --group-size 0 --max-shard-size 2GB
    E="$Q eval-ppl --text $T --device cuda --model"
    run $E /tmp/l8b
    run $E /tmp/l8b-w8
    run $E /tmp/l8b-w8 --batch 8
    run $E /tmp/l8b --batch 8
    run $E /tmp/l8b
    run $E /tmp/l8b-w8
    run $E /tmp/l8b-w8 --batch 8
    run env QT_CUDA_PROFILE=1 $E /tmp/l8b-w8
    run env QT_CUDA_PROFILE=1 $E /tmp/l8b ;;
  *) echo "usage: $0 KIT tests|8b[,..]" >&2; exit 2 ;;
esac; done
