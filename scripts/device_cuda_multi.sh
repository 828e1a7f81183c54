#!/usr/bin/env bash
# Two GPUs (docs/cuda.md "Several GPUs"; figures in results/cuda.md "Two GPUs"), as measured: on a
# machine with two GPUs, from the repository root: bash scripts/device_cuda_multi.sh KIT
# KIT holds qt.xz and test_cuda.xz (xz-packed build-cuda/quanttool and test_cuda, built from this
# checkout's folder QT_BUILD_SRC — the absolute path of the build's source folder, required — which is linked here), lib.tar.xz (the
# shared libraries the device lacks, device_cuda.sh says which) and tok/ (SmolLM2's tokenizer).
# test_cuda runs while a 70B-wide checkpoint of NL layers (default 52: more than one H100 holds) and
# its first 16 layers (hard links) are written; then eval-ppl on the full text: one GPU on 16 layers,
# two GPUs on 16 and on NL, transformers device_map="auto" on NL, two GPUs again, one GPU on NL (out
# of memory), the pipeline on one GPU (cuda:0,0), one GPU on 16 again. Each command's output goes
# to $OUT/runN.txt where OUT is set.
set -o pipefail
K=$(cd "$1" && pwd); R=$(pwd)
T0=$EPOCHREALTIME; el() { python3 -c "print(f'{$EPOCHREALTIME-$T0:.0f}')"; }
[ -n "${QT_BUILD_SRC:-}" ] || { echo "error: set QT_BUILD_SRC to the folder the kit's binaries were built in" >&2; exit 2; }
S=$QT_BUILD_SRC; mkdir -p "$(dirname "$S")" && ln -sfn "$R" "$S"
mkdir -p /tmp/kit; for b in qt test_cuda; do xz -dc "$K/$b.xz" > /tmp/kit/$b && chmod +x /tmp/kit/$b; done
tar -xJf "$K/lib.tar.xz" -C /tmp/kit
CUBLAS_PY=$(python3 -c "import nvidia.cublas,os;print(os.path.dirname(nvidia.cublas.__file__)+'/lib')" 2>/dev/null)
export LD_LIBRARY_PATH=/tmp/kit/lib:/usr/local/cuda/lib64:$CUBLAS_PY
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvidia-smi | grep -o "CUDA Version: [0-9.]*"
nvidia-smi topo -m | head -4; lscpu | grep 'Model name'; nproc; df -h /tmp | tail -1; free -g | head -2
python3 -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)"
Q=/tmp/kit/qt; T=$R/data/wikitext-2/wiki.test.raw; NL=${NL:-52}
( python3 $R/scripts/make_test_checkpoint.py --shape llama3-70b --layers $NL --also-layers 16 --workers 28 --tokenizer-from $K/tok --out /tmp/l70 > /tmp/ck.txt 2>&1; echo "ckpt rc=$?" >> /tmp/ck.txt; echo done > /tmp/ck.ready ) &
QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 220 /tmp/kit/test_cuda 2>&1 | grep -vE "^\[ RUN|^$|^\[       OK|^kv attention|^Google Test trace|^tiny-" | tail -30
echo "tests done at $(el) s"
while [ ! -f /tmp/ck.ready ]; do sleep 2; done; grep -E "B parameters|wrote|rc=|rror" /tmp/ck.txt; echo "checkpoints at $(el) s"; du -sh /tmp/l70
N=0
run() { local lim=$1; shift; local t0=$EPOCHREALTIME; timeout $lim "$@" > /tmp/last.txt 2>&1; local rc=$?
  grep -E "^PPL|^tokens/s|^stages|^wall|^weights|^method|^error|^internal|^transformers|^eval|GPU out" /tmp/last.txt | head -8
  echo "rc=$rc whole $(python3 -c "print(f'{$EPOCHREALTIME-$t0:.2f}')") s: ${*#/tmp/kit/} [at $(el) s]"
  N=$((N+1)); [ -n "${OUT:-}" ] && cp /tmp/last.txt $OUT/run$N.txt; }
run 100 $Q eval-ppl --device cuda --model /tmp/l70-16 --text $T
run 100 $Q eval-ppl --device cuda:0,1 --model /tmp/l70-16 --text $T
run 160 $Q eval-ppl --device cuda:0,1 --model /tmp/l70 --text $T
run 300 python3 $R/scripts/hf_ppl_cuda.py --model /tmp/l70 --text $T --device-map auto
run 160 $Q eval-ppl --device cuda:0,1 --model /tmp/l70 --text $T
run 60 $Q eval-ppl --device cuda --model /tmp/l70 --text $T
run 60 $Q eval-ppl --device cuda:0,0 --model /tmp/l70-16 --text $T
run 100 $Q eval-ppl --device cuda --model /tmp/l70-16 --text $T
