#!/usr/bin/env bash
# On the device machine, from the repository root: bash KIT/device_engine.sh STEP[,STEP] (a copy of this
# file in the kit folder KIT, carried under a git-ignored folder of the checkout)
# Kit: qt_new.xz / qt_base.xz (CUDA builds of the new and the baseline commit),
# cpu_new.xz / cpu_base.xz (CPU builds), test_cuda.xz, lib.tar.xz, tok/.
set -o pipefail
K=$(cd "$(dirname "$0")" && pwd); R=$(cd "$K/.." && pwd); STEP=$1
# The binaries read tests/golden and data/ from the source folder they were built in (QT_SOURCE_DIR):
# QT_BUILD_SRC names it, and it is linked to this checkout here.
[ -n "${QT_BUILD_SRC:-}" ] || { echo "error: set QT_BUILD_SRC to the folder the kit's binaries were built in" >&2; exit 2; }
mkdir -p "$(dirname "$QT_BUILD_SRC")" && ln -sfn "$R" "$QT_BUILD_SRC"
mkdir -p /tmp/kit
for b in qt_new qt_base cpu_new cpu_base cpu_pre test_cuda; do [ -f $K/$b.xz ] && { xz -dc "$K/$b.xz" > /tmp/kit/$b && chmod +x /tmp/kit/$b; }; done
tar -xJf "$K/lib.tar.xz" -C /tmp/kit
CUBLAS_PY=$(python3 -c "import nvidia.cublas,os;print(os.path.dirname(nvidia.cublas.__file__)+'/lib')" 2>/dev/null)
export LD_LIBRARY_PATH=/tmp/kit/lib:/usr/local/cuda/lib64:$CUBLAS_PY
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvidia-smi | grep -o "CUDA Version: [0-9.]*"
lscpu | grep 'Model name'
Q=/tmp/kit/qt_new; B=/tmp/kit/qt_base; T=$R/data/wikitext-2/wiki.test.raw
run() { local t0=$EPOCHREALTIME; timeout 250 "$@" > /tmp/last.txt 2>&1; local rc=$?; local t1=$EPOCHREALTIME
  grep -E "^PPL|^tokens/s|^error|^internal" /tmp/last.txt | head -3 | tr '\n' ' '
  echo "rc=$rc whole $(python3 -c "print(f'{$t1-$t0:.2f}')") s: ${*#/tmp/kit/}"; }
for s in ${STEP//,/ }; do case $s in
  tests)
    QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 400 /tmp/kit/test_cuda 2>&1 | grep -vE "^\[ RUN|^$|^\[       OK|^kv attention|^Google Test trace" | tail -60 ;;
  layouts)  # a SmolLM2-shaped checkpoint in every layout the GPU runs, full text
    python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    for L in "int8 --group-size 0" "affine --bits 4 --group-size 64" "affine --bits 8 --group-size 64" "nf4" "fp4" "int4 --group-size 0 --format native"; do
      o=/tmp/s135-$(echo $L | tr -d ' -'); $Q convert --in /tmp/s135 --out $o --scheme $L > /dev/null 2>&1 || echo "convert failed: $L"
      run $Q eval-ppl --device cuda --model $o --text $T --chunks 64; run /tmp/kit/cpu_new eval-ppl --threads 16 --model $o --text $T --chunks 64; done ;;
  speed8b)
    python3 $R/scripts/make_test_checkpoint.py --shape llama3-8b --tokenizer-from $K/tok --out /tmp/l8b > /dev/null
    $Q convert --in /tmp/l8b --out /tmp/l8b-w8 --scheme int8 --group-size 0 --max-shard-size 2GB > /dev/null 2>&1
    for i in 1 2; do for M in /tmp/l8b /tmp/l8b-w8; do run $B eval-ppl --device cuda --model $M --text $T; run $Q eval-ppl --device cuda --model $M --text $T; done; done ;;
  cpuab)  # CPU eval-ppl, 8 chunks, 2 threads pinned, base vs new, A B A B
    [ -d /tmp/s135 ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    [ -d /tmp/s135-w8 ] || $Q convert --in /tmp/s135 --out /tmp/s135-w8 --scheme int8 --group-size 0 > /dev/null 2>&1
    [ -d /tmp/s135-a4 ] || $Q convert --in /tmp/s135 --out /tmp/s135-a4 --scheme affine --bits 4 --group-size 64 > /dev/null 2>&1
    for cfg in "--model /tmp/s135" "--model /tmp/s135-w8" "--model /tmp/s135-a4" "--model /tmp/s135 --kv kivi:bits=4"; do
      for i in $(seq ${PAIRS:-3}); do for X in cpu_base cpu_new; do run taskset -c 2,3 /tmp/kit/$X eval-ppl --threads 2 --chunks 8 --text $T $cfg; done; done; done ;;
  generate)  # greedy generate on the GPU beside the CPU's (same checkpoint, bf16 both): the text and tok/s
    [ -d /tmp/s135 ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    for D in "cuda:$Q" "cpu:/tmp/kit/cpu_new"; do
      timeout 120 ${D#*:} generate --device ${D%%:*} --compute bf16 --model /tmp/s135 --prompt "The history of the city" \
        --max-tokens 32 > /tmp/gen-${D%%:*}.txt 2> /tmp/gen-${D%%:*}.err; echo "rc=$? ${D%%:*}: $(tail -2 /tmp/gen-${D%%:*}.err | tr '\n' ' ')"; done
    cmp -s /tmp/gen-cuda.txt /tmp/gen-cpu.txt && echo "generate: the GPU's text equals the CPU's" || { echo "generate: texts differ"; head -c 600 /tmp/gen-cuda.txt; echo; head -c 600 /tmp/gen-cpu.txt; } ;;
  moe)  # a mixture-of-experts folder (SmolLM2's shape upcycled to 4 experts) is refused on the GPU with one line, exit 2
    [ -d /tmp/s135 ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    $Q convert --in /tmp/s135 --out /tmp/s135-f32 --dtype f32 > /dev/null  # the upcycler reads f32 (numpy has no bf16)
    python3 $R/scripts/make_upcycled_moe.py /tmp/s135-f32 /tmp/s135-moe > /dev/null
    for c in "eval-ppl --text $T --chunks 2" "generate --compute bf16 --prompt Hello --max-tokens 2"; do
      $Q $c --device cuda --model /tmp/s135-moe > /dev/null 2> /tmp/moe.err; echo "rc=$? $(cat /tmp/moe.err | tr '\n' '|') (${c%% *})"; done ;;
  w8ab)  # W8A8 only, cpu_base / cpu_pre / cpu_new in turn (PAIRS rounds)
    [ -d /tmp/s135 ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    [ -d /tmp/s135-w8 ] || $Q convert --in /tmp/s135 --out /tmp/s135-w8 --scheme int8 --group-size 0 > /dev/null 2>&1
    for i in $(seq ${PAIRS:-3}); do for X in cpu_base cpu_pre cpu_new; do [ -x /tmp/kit/$X ] && run taskset -c 2,3 /tmp/kit/$X eval-ppl --threads 2 --chunks 8 --text $T --model /tmp/s135-w8; done; done ;;
esac; done
