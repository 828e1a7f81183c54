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
    [ -d /tmp/l8b ] || python3 $R/scripts/make_test_checkpoint.py --shape llama3-8b --tokenizer-from $K/tok --out /tmp/l8b > /dev/null
    [ -d /tmp/l8b-w8 ] || $Q convert --in /tmp/l8b --out /tmp/l8b-w8 --scheme int8 --group-size 0 --max-shard-size 2GB > /dev/null 2>&1
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
  moe)  # a mixture-of-experts folder (SmolLM2's shape upcycled to 4 experts) on the GPU: eval-ppl and generate run (rc=0)
    [ -d /tmp/s135 ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    $Q convert --in /tmp/s135 --out /tmp/s135-f32 --dtype f32 > /dev/null  # the upcycler reads f32 (numpy has no bf16)
    python3 $R/scripts/make_upcycled_moe.py /tmp/s135-f32 /tmp/s135-moe > /dev/null
    for c in "eval-ppl --text $T --chunks 2" "generate --compute bf16 --prompt Hello --max-tokens 2"; do
      $Q $c --device cuda --model /tmp/s135-moe > /dev/null 2> /tmp/moe.err; echo "rc=$? $(cat /tmp/moe.err | tr '\n' '|') (${c%% *})"; done ;;
  moegpu)  # mixture-of-experts on the GPU: test_cuda (QT_REQUIRE_GPU=1) while the Qwen3-30B-A3B-shaped
    # checkpoints are written (MOE_LAYERS layers, default 16, and a 1-layer one); GPU vs CPU PPL on the
    # 1-layer folder (128 experts, 8 chunks); then the full text in bf16, quanttool --device cuda and
    # transformers (scripts/hf_ppl_cuda.py) alternated, whole process each
    NL=${MOE_LAYERS:-16}
    ( python3 $R/scripts/make_test_checkpoint.py --shape qwen3-30b-a3b --layers 1 --tokenizer-from $K/tok --out /tmp/q30-1 > /dev/null 2>&1
      python3 $R/scripts/make_test_checkpoint.py --shape qwen3-30b-a3b --layers $NL --tokenizer-from $K/tok --out /tmp/q30 --max-shard-size 4GB > /tmp/q30.txt 2>&1
      echo done > /tmp/q30.ready ) &
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
    t0=$EPOCHREALTIME
    QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 300 /tmp/kit/test_cuda 2>&1 | grep -vE "^\[ RUN|^$|^\[       OK|^kv attention|^Google Test trace" | tail -40
    echo "test_cuda took $(python3 -c "print(f'{$EPOCHREALTIME-$t0:.1f}')") s"
    while [ ! -d /tmp/q30-1 ] && [ ! -f /tmp/q30.ready ]; do sleep 2; done
    run $Q eval-ppl --device cuda --model /tmp/q30-1 --text $T --chunks 8; grep -q "^PPL" /tmp/last.txt || { cat /tmp/last.txt | tail -5; exit 1; }
    run $Q eval-ppl --threads 16 --model /tmp/q30-1 --text $T --chunks 8
    QT_CUDA_PROFILE=1 timeout 100 $Q eval-ppl --device cuda --model /tmp/q30-1 --text $T --chunks 64 2>&1 | grep -iE "gemm|moe|swiglu|attention|total|tokens/s" | head -14
    while [ ! -f /tmp/q30.ready ]; do sleep 2; done; tail -1 /tmp/q30.txt; du -sh /tmp/q30; df -h /tmp | tail -1
    for i in 1 2; do
      run $Q eval-ppl --device cuda --model /tmp/q30 --text $T
      t0=$EPOCHREALTIME; timeout 280 python3 $R/scripts/hf_ppl_cuda.py --model /tmp/q30 --text $T --device-map > /tmp/hf.txt 2>&1; rc=$?
      echo "$(grep -E "^PPL|^eval|^transformers|Error" /tmp/hf.txt | tr '\n' ' ') rc=$rc whole $(python3 -c "print(f'{$EPOCHREALTIME-$t0:.2f}')") s: transformers"; done
    [ -x $B ] && run $B eval-ppl --device cuda --model /tmp/q30 --text $T  # the baseline build, where the kit has one
    QT_CUDA_PROFILE=1 timeout 100 $Q eval-ppl --device cuda --model /tmp/q30 --text $T 2>&1 | grep -iE "gemm|moe|swiglu|attention|norm|total|tokens/s" | head -16 ;;
  w8ab)  # W8A8 only, cpu_base / cpu_pre / cpu_new in turn (PAIRS rounds)
    [ -d /tmp/s135 ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    [ -d /tmp/s135-w8 ] || $Q convert --in /tmp/s135 --out /tmp/s135-w8 --scheme int8 --group-size 0 > /dev/null 2>&1
    for i in $(seq ${PAIRS:-3}); do for X in cpu_base cpu_pre cpu_new; do [ -x /tmp/kit/$X ] && run taskset -c 2,3 /tmp/kit/$X eval-ppl --threads 2 --chunks 8 --text $T --model /tmp/s135-w8; done; done ;;
  kl)  # KL on the GPU, new against base binary (same PPL, KLD to the printed digits), and the JSON's figures
    [ -d /tmp/s135 ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    [ -d /tmp/s135-w8 ] || $Q convert --in /tmp/s135 --out /tmp/s135-w8 --scheme int8 --group-size 0 > /dev/null 2>&1
    for X in $B $Q; do timeout 200 $X eval-ppl --device cuda --model /tmp/s135-w8 --kl-base-model /tmp/s135 --text $T --chunks 32 --json /tmp/kl.json > /tmp/kl.txt 2>&1; echo "rc=$? ${X#/tmp/kit/}: $(grep -E '^PPL|Mean +KLD|^KLD|kld' /tmp/kl.txt | head -3 | tr '\n' ' ')"; python3 -c "import json;d=json.load(open('/tmp/kl.json'));print(repr(d['ppl']),repr(d['kld']['kld_mean']))"; done
    for X in $B $Q; do timeout 200 $X eval-ppl --device cuda --model /tmp/s135 --kv kivi:bits=4 --text $T --chunks 32 --json /tmp/k4.json > /dev/null 2>&1; echo "rc=$? ${X#/tmp/kit/} kivi4: $(python3 -c "import json;d=json.load(open('/tmp/k4.json'));print(repr(d['ppl']))")"; done ;;
  scale)  # threads 1..16 on the Xeon: bench --peak, then eval-ppl (SmolLM2 shape, 16 chunks) f32 / bf16 / W8A8 / affine-4
    [ -d /tmp/s135 ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    [ -d /tmp/s135-w8 ] || $Q convert --in /tmp/s135 --out /tmp/s135-w8 --scheme int8 --group-size 0 > /dev/null 2>&1
    [ -d /tmp/s135-a4 ] || $Q convert --in /tmp/s135 --out /tmp/s135-a4 --scheme affine --bits 4 --group-size 64 > /dev/null 2>&1
    lscpu | grep -E "^CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L3"; grep -o -w -E "amx_tile|amx_bf16|amx_int8|avx512_vnni|avx512_bf16" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
    timeout 200 /tmp/kit/cpu_new bench --peak 2>&1 | tail -25
    for th in 1 2 4 8 16; do for cfg in "--model /tmp/s135" "--model /tmp/s135 --compute bf16" "--model /tmp/s135-w8" "--model /tmp/s135-a4"; do
      run /tmp/kit/cpu_new eval-ppl --threads $th --chunks 16 --text $T $cfg; done; done ;;
  fp8)  # FP8 on the GPU: 8B-shaped checkpoints made in the background while test_cuda runs; SmolLM2-shaped
    # fp8 PPL GPU vs CPU (64 chunks); the 8B shape full text bf16 / W8A8 / FP8 (/ FP8 fast accumulation) alternated
    python3 -c "import ctypes;print('cuBLASLt', ctypes.CDLL('libcublasLt.so.13').cublasLtGetVersion())"
    ( python3 $R/scripts/make_test_checkpoint.py --shape llama3-8b --tokenizer-from $K/tok --out /tmp/l8b > /dev/null
      $Q convert --in /tmp/l8b --out /tmp/l8b-w8 --scheme int8 --group-size 0 --max-shard-size 2GB > /tmp/cw8.txt 2>&1
      $Q convert --in /tmp/l8b --out /tmp/l8b-f8 --scheme fp8 --max-shard-size 2GB > /tmp/cf8.txt 2>&1
      echo done > /tmp/l8b.ready ) &
    t0=$EPOCHREALTIME
    QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 300 /tmp/kit/test_cuda 2>&1 | grep -vE "^\[ RUN|^$|^\[       OK|^kv attention|^Google Test trace" | tail -40
    echo "test_cuda took $(python3 -c "print(f'{$EPOCHREALTIME-$t0:.1f}')") s"
    python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    $Q convert --in /tmp/s135 --out /tmp/s135-f8 --scheme fp8 > /dev/null 2>&1 || echo "convert fp8 failed"
    run $Q eval-ppl --device cuda --model /tmp/s135-f8 --text $T --chunks 64
    run $Q eval-ppl --threads 16 --model /tmp/s135-f8 --text $T --chunks 64
    run $Q eval-ppl --threads 16 --model /tmp/s135-f8 --text $T --chunks 64 --kv f16
    run $Q eval-ppl --device cuda --model /tmp/s135 --text $T --chunks 64
    while [ ! -f /tmp/l8b.ready ]; do sleep 2; done; tail -2 /tmp/cw8.txt /tmp/cf8.txt; du -sh /tmp/l8b*
    for i in 1 2; do for M in /tmp/l8b /tmp/l8b-w8 /tmp/l8b-f8; do run $Q eval-ppl --device cuda --model $M --text $T; done
      done
    QT_CUDA_PROFILE=1 timeout 100 $Q eval-ppl --device cuda --model /tmp/l8b-f8 --text $T 2>&1 | grep -iE "gemm|total|tune|tokens/s" | head -20 ;;
  cpupar)  # chunks side by side on the Xeon: threads (THREADS, default 1 2 4 8 16) x chunks at once (1 2 4 8 16, P <= threads), SmolLM2 shape, CHUNKS (16) chunks; then the defaults (no --threads, no --chunk-parallel); BIG=1 adds the 8-layer Llama-3-8B shape at 16 threads, P 1 2 4
    C=/tmp/kit/cpu_new
    [ -d /tmp/s135 ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    [ -d /tmp/s135-w8 ] || $C convert --in /tmp/s135 --out /tmp/s135-w8 --scheme int8 --group-size 0 > /dev/null 2>&1
    [ -d /tmp/s135-a4 ] || $C convert --in /tmp/s135 --out /tmp/s135-a4 --scheme affine --bits 4 --group-size 64 > /dev/null 2>&1
    lscpu | grep -E "^CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L3"; nproc
    runp() { timeout 250 "$@" > /tmp/last.txt 2>&1; local rc=$?
      echo "rc=$rc $(grep -E '^PPL|^tokens/s|^peak RSS|^error|^internal' /tmp/last.txt | sed 's/  */ /g' | tr '\n' ' ')| ${*#/tmp/kit/}"; }
    CFGS=${CFGS:-"--model=/tmp/s135 --model=/tmp/s135+--compute=bf16 --model=/tmp/s135-w8 --model=/tmp/s135-w8+--compute=bf16 --model=/tmp/s135-a4"}
    for rnd in $(seq ${ROUNDS:-1}); do
    for th in ${THREADS:-1 2 4 8 16}; do for P in 1 2 4 8 16; do [ $P -le $th ] || continue
      for cfg in $CFGS; do
        runp $C eval-ppl --threads $th --chunk-parallel $P --chunks ${CHUNKS:-16} --text $T ${cfg//[+=]/ }; done; done; done; done
    for cfg in $CFGS; do runp $C eval-ppl --chunks ${CHUNKS:-16} --text $T ${cfg//[+=]/ }; done
    if [ -n "${BIG:-}" ]; then
      [ -d /tmp/l8b8 ] || python3 $R/scripts/make_test_checkpoint.py --shape llama3-8b --layers 8 --tokenizer-from $K/tok --out /tmp/l8b8 > /dev/null
      [ -d /tmp/l8b8-w8 ] || $C convert --in /tmp/l8b8 --out /tmp/l8b8-w8 --scheme int8 --group-size 0 > /dev/null 2>&1
      for P in 1 2 4; do for cfg in "--model /tmp/l8b8 --compute bf16" "--model /tmp/l8b8-w8 --compute bf16"; do
        runp $C eval-ppl --threads 16 --chunk-parallel $P --chunks 16 --text $T $cfg; done; done
      for cfg in "--model /tmp/l8b8 --compute bf16" "--model /tmp/l8b8-w8 --compute bf16"; do runp $C eval-ppl --chunks 16 --text $T $cfg; done
    fi ;;
  affamx)  # affine 4-bit against int8 tokens, AMX tiles against the VNNI ones (--kernel avx512), 16 threads: the 8-layer Llama-3-8B shape (bf16 on AMX beside it) and the SmolLM2 shape, ROUNDS (2) rounds in turn
    C=/tmp/kit/cpu_new
    [ -d /tmp/l8b8 ] || python3 $R/scripts/make_test_checkpoint.py --shape llama3-8b --layers 8 --tokenizer-from $K/tok --out /tmp/l8b8 > /dev/null
    [ -d /tmp/l8b8-a4 ] || $C convert --in /tmp/l8b8 --out /tmp/l8b8-a4 --scheme affine --bits 4 --group-size 64 > /dev/null 2>&1
    [ -d /tmp/s135 ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    [ -d /tmp/s135-a4 ] || $C convert --in /tmp/s135 --out /tmp/s135-a4 --scheme affine --bits 4 --group-size 64 > /dev/null 2>&1
    lscpu | grep -E "^CPU\(s\)|Model name|NUMA node\(s\)"
    runp() { timeout 250 "$@" > /tmp/last.txt 2>&1; local rc=$?
      echo "rc=$rc $(grep -E '^PPL|^tokens/s|^error|^internal' /tmp/last.txt | sed 's/  */ /g' | tr '\n' ' ')| ${*#/tmp/kit/}"; }
    for rnd in $(seq ${ROUNDS:-2}); do
      for k in amx avx512; do runp $C eval-ppl --threads 16 --chunks 16 --text $T --model /tmp/l8b8-a4 --weight-act int8 --kernel $k; done
      runp $C eval-ppl --threads 16 --chunks 16 --text $T --model /tmp/l8b8 --compute bf16
      for k in amx avx512; do runp $C eval-ppl --threads 16 --chunks 32 --text $T --model /tmp/s135-a4 --weight-act int8 --kernel $k; done
    done ;;
esac; done
