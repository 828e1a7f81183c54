#!/usr/bin/env bash
# On the device machine, from the repository root: QT_BUILD_SRC=DIR bash KIT/device_cuda_kv_host.sh STEP[,STEP]
# (a copy of this file in the kit folder KIT, carried under a git-ignored folder of the checkout;
# QT_BUILD_SRC: the folder the kit's binaries were built in, linked here to the checkout)
# Kit: quanttool.xz + test_cuda.xz (a CUDA build), lib.tar.xz (shared libs the device lacks), tok/ (SmolLM2's tokenizer).
# Every KV method on a SmolLM2-shaped random checkpoint, 64 chunks: GPU (native and host codec) and CPU.
# Steps: gpu (calibrate, then every KV method on the GPU), tests, cpu (the same on the CPU, 16 threads),
# cpubf16 (the CPU with --compute bf16: its own spread).
set -o pipefail
K=$(cd "$(dirname "$0")" && pwd); R=$(cd "$K/.." && pwd); STEP=$1
[ -n "${QT_BUILD_SRC:-}" ] || { echo "error: set QT_BUILD_SRC to the folder the kit's binaries were built in" >&2; exit 2; }
mkdir -p "$(dirname "$QT_BUILD_SRC")" && ln -sfn "$R" "$QT_BUILD_SRC"   # tests/golden, data
mkdir -p /tmp/kit
for b in quanttool test_cuda; do xz -dc "$K/$b.xz" > /tmp/kit/$b && chmod +x /tmp/kit/$b; done
tar -xJf "$K/lib.tar.xz" -C /tmp/kit
CUBLAS_PY=$(python3 -c "import nvidia.cublas,os;print(os.path.dirname(nvidia.cublas.__file__)+'/lib')" 2>/dev/null)
export LD_LIBRARY_PATH=/tmp/kit/lib:/usr/local/cuda/lib64:$CUBLAS_PY
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; lscpu | grep 'Model name'; date -u
Q=/tmp/kit/quanttool; T=$R/data/wikitext-2/wiki.test.raw; O=${OUT:-/tmp/out}; mkdir -p $O
T0=$SECONDS
setup() {
  [ -d /tmp/s135 ] || python3 $R/scripts/make_test_checkpoint.py --shape smollm2-135m --tokenizer-from $K/tok --out /tmp/s135 > /dev/null
  if [ ! -f /tmp/art/manifest.json ]; then
    for m in "vecinfer:bits=2 both" "spectral:bits=3 both" "commvq:bits=1 keys"; do set -- $m
      $Q calibrate --method kv-codebook --kv $1 --kv-sides $2 --model /tmp/s135 --text $R/data/wikitext-2/wiki.valid.tokens.txt --out /tmp/art > $O/calib-${1%%:*}.txt 2>&1 || echo "calibrate $1 failed: $(tail -2 $O/calib-${1%%:*}.txt)"
    done; echo "calibrated at $((SECONDS-T0)) s"
  fi
}
# name|flags
CFGS=("f16|--kv f16" "affine:bits=4|--kv affine:bits=4" "kivi:bits=2|--kv kivi:bits=2" "turboquant_mse:bits=3|--kv turboquant_mse:bits=3"
 "turboquant_prod:bits=3|--kv turboquant_prod:bits=3" "qjl:bits=2|--kv qjl:bits=2" "rvq:bits=2|--kv rvq:bits=2" "polar:bits=4|--kv polar:bits=4"
 "rabitq:bits=2|--kv rabitq:bits=2" "vecinfer:bits=2|--kv vecinfer:bits=2 --artifacts /tmp/art" "spectral:bits=3|--kv spectral:bits=3 --artifacts /tmp/art"
 "commvq:bits=1 keys, f16 values|--kv-k commvq:bits=1 --kv-v f16 --artifacts /tmp/art" "affine:bits=4,rot=wht|--kv affine:bits=4,rot=wht")
DEC=("kivi:bits=2 decode|--kv kivi:bits=2 --kv-mode decode" "rvq:bits=2,r=64 decode|--kv rvq:bits=2,r=64 --kv-mode decode" "turboquant_prod:bits=3,r=64 decode|--kv turboquant_prod:bits=3,r=64 --kv-mode decode")
one() {  # dev name flags...
  local dev=$1 name=$2; shift 2; local f=$O/$dev-$(echo "$name" | tr -c 'a-zA-Z0-9_.\n' '_').txt
  local t0=$EPOCHREALTIME
  if [ $dev = gpu ]; then timeout 200 $Q eval-ppl --device cuda --model /tmp/s135 --text $T --chunks 64 "$@" > $f 2>&1
  else timeout $((590-SECONDS+T0)) $Q eval-ppl --threads 16 --model /tmp/s135 --text $T --chunks 64 "$@" > $f 2>&1; fi
  local rc=$? t1=$EPOCHREALTIME
  echo "$dev | $name | $(grep -E '^PPL' $f | awk '{print $2}') | $(grep -E '^tokens/s' $f | awk '{print $2}') | whole $(python3 -c "print(f'{$t1-$t0:.2f}')") s | rc=$rc $(grep -E '^error|^internal' $f | head -1)" | tee -a $O/summary.txt
}
for s in ${STEP//,/ }; do case $s in
  gpu) setup
    for c in "${CFGS[@]}" "${DEC[@]}"; do one gpu "${c%%|*}" ${c#*|}; done
    for c in "f16|--kv f16" "rvq:bits=2|--kv rvq:bits=2" "qjl:bits=2|--kv qjl:bits=2"; do one gpu "${c%%|*} (again)" ${c#*|}; done
    QT_CUDA_PROFILE=1 $Q eval-ppl --device cuda --model /tmp/s135 --text $T --chunks 64 --kv rvq:bits=2 > $O/profile-rvq.txt 2>&1 ;;
  tests)
    QT_REQUIRE_GPU=1 QT_BIN=$Q timeout ${TESTS_S:-300} /tmp/kit/test_cuda > $O/tests.txt 2>&1; echo "tests rc=$?"
    grep -E "^\[  FAILED|^\[  PASSED|FAILED TEST|Failure" $O/tests.txt | head -30; grep -E "^kv host codec|^tiny|^host codec" $O/tests.txt | head -80 ;;
  cpu) setup
    for c in "${CFGS[@]:9:3}"; do one gpu "${c%%|*} (this machine)" ${c#*|}; done
    for c in "${CFGS[@]:4:8}" "${CFGS[@]:0:4}" "${DEC[0]}" "${CFGS[12]}"; do [ $((SECONDS-T0)) -gt ${CPU_UNTIL:-560} ] && { echo "cpu: out of time before ${c%%|*}"; break; }; one cpu "${c%%|*}" ${c#*|}; done ;;
  cpubf16) setup  # the CPU's own spread: its bf16 compute against its default f32, same caches
    for c in "${CFGS[8]}" "${CFGS[2]}" "${CFGS[3]}" "${CFGS[9]}" "${CFGS[12]}" "${CFGS[10]}" "${CFGS[7]}" "${CFGS[5]}"; do
      [ $((SECONDS-T0)) -gt ${CPU_UNTIL:-560} ] && break; one cpu "${c%%|*} bf16" ${c#*|} --compute bf16; done
    for c in "${DEC[1]}" "${DEC[2]}"; do [ $((SECONDS-T0)) -gt ${CPU_UNTIL:-560} ] && break; one cpu "${c%%|*}" ${c#*|}; done ;;
esac; done
echo "done at $((SECONDS-T0)) s"
