#!/usr/bin/env bash
# The W8A8 and FP8 GEMMs with fused epilogues (libquant/cuda/gemm_q8_fused.cu: gate|up with SwiGLU;
# gemm_q8_rope.cu: q|k|v with RoPE; figures in results/cuda.md "W8A8: the gate|up GEMM with SwiGLU in
# its epilogue", "W8A8: the q|k|v GEMM with RoPE in its epilogue" and "FP8 on the fused GEMMs"), as
# measured: on the device machine, from the
# repository root: QT_BUILD_SRC=DIR bash scripts/device_cuda_fused.sh KIT STEP[,STEP]
# KIT holds qt.xz, qt_base.xz and test_cuda.xz (xz-packed build-cuda/quanttool of this tree and of
# the release before it, and test_cuda, built by
# scripts/build_cuda.sh in the folder QT_BUILD_SRC names, linked here for the tests' data),
# lib.tar.xz (the shared libraries the device lacks, device_cuda.sh says which) and tok/ (SmolLM2's
# tokenizer). Steps:
#   prep  — start writing the 8b step's checkpoints in the background
#   tests — the fused GEMM's and the tiny models' GPU tests (QT_REQUIRE_GPU=1), then the whole test_cuda
#   8b    — the Llama-3-8B-shaped checkpoint (written here) and its W8A8 and FP8 folders; full text,
#           two rounds of bf16, then W8A8 and FP8 each of the release before (qt_base) and of this
#           tree, alternated; then FP8's and W8A8's stage profiles both ways and bf16's
#           (QT_CUDA_PROFILE=1), and bench --peak
#   kld   — FP8's KLD against the bf16 checkpoint, this tree (the tensor cores' own accumulation)
#           against the release before (cuBLASLt's promotion to fp32): the 8B shape on the GPU, full
#           text; a SmolLM2-135M-shaped random checkpoint, 64 chunks, on the GPU and on the CPU (fp32 sums)
#   clocks — bf16, W8A8 and FP8 of this tree in turn, two rounds, with the GPU's SM clock, power and
#           temperature sampled every 50 ms (nvidia-smi) during each evaluation: their means
#   head  — the output head's cuBLASLt plans and stage time, bf16 against W8A8 (QT_CUDA_PROFILE=1)
set -o pipefail
K=$(cd "$1" && pwd); R=$(pwd); STEPS=${2:-tests,8b}
T0=$EPOCHREALTIME; el() { python3 -c "print(f'{$EPOCHREALTIME-$T0:.0f}')"; }
[ -n "${QT_BUILD_SRC:-}" ] || { echo "error: set QT_BUILD_SRC to the folder the kit's binaries were built in" >&2; exit 2; }
S=$QT_BUILD_SRC; mkdir -p "$(dirname "$S")" && ln -sfn "$R" "$S"
if [ ! -x /tmp/kit/qt ] || [ "$K/qt.xz" -nt /tmp/kit/stamp ]; then
  mkdir -p /tmp/kit; for b in qt qt_base test_cuda; do xz -dc "$K/$b.xz" > /tmp/kit/$b && chmod +x /tmp/kit/$b; done
  tar -xJf "$K/lib.tar.xz" -C /tmp/kit; touch /tmp/kit/stamp
fi
CUBLAS_PY=$(python3 -c "import nvidia.cublas,os;print(os.path.dirname(nvidia.cublas.__file__)+'/lib')" 2>/dev/null)
export LD_LIBRARY_PATH=/tmp/kit/lib:/usr/local/cuda/lib64:$CUBLAS_PY
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvidia-smi | grep -o "CUDA Version: [0-9.]*"
Q=/tmp/kit/qt; T=$R/data/wikitext-2/wiki.test.raw
run() { local lim=$1; shift; local t0=$EPOCHREALTIME; timeout $lim "$@" > /tmp/last.txt 2>&1; local rc=$?
  grep -E "^PPL|^Mean    KLD|^tokens/s|^error|^internal|^cuda stage|^  |^GPU out" /tmp/last.txt | head -20
  echo "rc=$rc whole $(python3 -c "print(f'{$EPOCHREALTIME-$t0:.2f}')") s: ${*#/tmp/kit/} [at $(el) s]"; }
for s in ${STEPS//,/ }; do case $s in
  prep)  # the 8b step's checkpoints, in the background (while the tests run)
    touch /tmp/prep.running
    (setsid nohup bash -c "python3 $R/scripts/make_test_checkpoint.py --shape llama3-8b --workers 16 --tokenizer-from $K/tok \
      --out /tmp/l8b > /tmp/ck.txt 2>&1; $Q convert --in /tmp/l8b --out /tmp/l8b-w8 --scheme int8 --group-size 0 > /tmp/cv1.txt 2>&1;
      $Q convert --in /tmp/l8b --out /tmp/l8b-f8 --scheme fp8 > /tmp/cv2.txt 2>&1; rm /tmp/prep.running" > /dev/null 2>&1 &) ;;
  tests)
    QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 200 /tmp/kit/test_cuda --gtest_filter='CudaFusedGemm.*:Cuda.TinyLlama*:Cuda.Fp8*' 2>&1 |
      grep -vE "^\[ RUN|^$|^Google Test trace"
    QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 300 /tmp/kit/test_cuda 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|tests ran"
    echo "tests done at $(el) s" ;;
  8b)
    while [ -f /tmp/prep.running ]; do sleep 2; done  # the background preparation below
    [ -d /tmp/l8b ] || python3 $R/scripts/make_test_checkpoint.py --shape llama3-8b --workers 16 --tokenizer-from $K/tok \
      --out /tmp/l8b > /dev/null
    [ -d /tmp/l8b-w8 ] || run 300 $Q convert --in /tmp/l8b --out /tmp/l8b-w8 --scheme int8 --group-size 0
    [ -d /tmp/l8b-f8 ] || run 300 $Q convert --in /tmp/l8b --out /tmp/l8b-f8 --scheme fp8
    E="$Q eval-ppl --text $T --device cuda --model" B="/tmp/kit/qt_base eval-ppl --text $T --device cuda --model"
    for round in 1 2; do
      run 100 $E /tmp/l8b
      for m in w8 f8; do
        run 100 $B /tmp/l8b-$m
        run 100 $E /tmp/l8b-$m
      done
    done
    for m in f8 w8; do
      run 100 env QT_CUDA_PROFILE=1 $E /tmp/l8b-$m
      run 100 env QT_CUDA_PROFILE=1 $B /tmp/l8b-$m
    done
    run 100 env QT_CUDA_PROFILE=1 $E /tmp/l8b
    $Q bench --peak --device cuda 2>&1 | tail -4 ;;
  clocks)
    while [ -f /tmp/prep.running ]; do sleep 2; done
    for round in 1 2; do
      for m in l8b l8b-w8 l8b-f8; do
        nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 50 > /tmp/smi.txt &
        smi=$!
        run 100 $Q eval-ppl --text $T --device cuda --model /tmp/$m
        kill $smi; wait $smi 2>/dev/null
        # the samples while the GPU drew more than 200 W (the evaluation, not the load)
        awk -F', ' -v m=$m '$2 > 200 { n++; c += $1; p += $2; t += $3 } END { if (n) printf "%s: %d samples over 200 W: SM %.0f MHz, %.0f W, %.0f C\n", m, n, c/n, p/n, t/n }' /tmp/smi.txt
      done
    done ;;
  kld)
    while [ -f /tmp/prep.running ]; do sleep 2; done
    K8="eval-ppl --text $T --device cuda --model /tmp/l8b-f8 --kl-base-model /tmp/l8b"
    run 200 $Q $K8; run 200 /tmp/kit/qt_base $K8
    grep -q . /tmp/s135/config.json 2>/dev/null || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m \
      --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
    [ -d /tmp/s135-f8 ] || run 100 $Q convert --in /tmp/s135 --out /tmp/s135-f8 --scheme fp8
    KS="eval-ppl --text $T --chunks 64 --model /tmp/s135-f8 --kl-base-model /tmp/s135"
    run 100 $Q $KS --device cuda; run 100 /tmp/kit/qt_base $KS --device cuda; run 200 $Q $KS --threads 16 ;;
  head)  # the output head's cuBLASLt plan and time, bf16 model against W8A8 (its head in bf16 too)
    while [ -f /tmp/prep.running ]; do sleep 2; done
    for m in l8b l8b-w8 l8b l8b-w8; do
      run 100 env QT_CUDA_PROFILE=1 $Q eval-ppl --text $T --device cuda --model /tmp/$m
      grep "lt plan bf16 49152" /tmp/last.txt
    done ;;
  *) echo "usage: $0 KIT prep|tests|8b|kld|clocks|head[,..]" >&2; exit 2 ;;
esac; done
