#!/usr/bin/env bash
# On the device machine: the GPU tests and the quantized KV caches on the real SmolLM2
# (results/cuda.md §Quantized KV caches on the GPU; docs/cuda.md). Same kit as
# scripts/device_cuda.sh, but the binaries travel xz-compressed (quanttool.xz, test_cuda.xz,
# stripped) and the GGUF in parts of at most ~33 MiB, one per call (the working tree and the
# carried kit travel together, 64 MiB a call), kept in /tmp/parts between calls made back to back
# while the machine stays warm.
# Usage, from the repository root on the device: QT_BUILD_SRC=DIR bash K/device_cuda_kv.sh K STEP
#   STEP tests — unpack, the GPU tests (QT_REQUIRE_GPU=1), and keep K/model.part.* in /tmp/parts
#        part  — keep K/model.part.* in /tmp/parts
#        kv    — the model from /tmp/parts + K's part: GPU against CPU PPL at 64 chunks for each KV
#                method and mode, then tokens/s at --ctx 4096 over the full text (f16 first and last)
#        kvx   — where GPU and CPU differ (modes, --batch, keys vs values, windows)
#        gpu   — the GPU side of kv/kvx again (after a GPU change) and ctx-4096 profiles
#        8b    — the Llama-3-8B-shaped checkpoint (made here from K/tok): bf16 against NF4
#        8bkv  — KV caches at ctx 4096 on it;  nf4 — SmolLM2 as NF4, GPU against CPU
set -o pipefail
K=$(cd "$1" && pwd); STEP=$2; R=$PWD
T=$R/data/wikitext-2/wiki.test.raw
[ -n "${QT_BUILD_SRC:-}" ] || { echo "error: set QT_BUILD_SRC to the folder the kit's binaries were built in" >&2; exit 2; }
mkdir -p "$(dirname "$QT_BUILD_SRC")" && ln -sfn "$R" "$QT_BUILD_SRC"  # QT_SOURCE_DIR of the build: tests/golden, data
mkdir -p /tmp/kit; for b in quanttool test_cuda; do xz -dc "$K/$b.xz" > /tmp/kit/$b && chmod +x /tmp/kit/$b; done
CUBLAS_PY=$(python3 -c "import nvidia.cublas,os;print(os.path.dirname(nvidia.cublas.__file__)+'/lib')" 2>/dev/null)
export LD_LIBRARY_PATH=$K/lib:/usr/local/cuda/lib64:$CUBLAS_PY
Q=/tmp/kit/quanttool
mkdir -p /tmp/parts && cp "$K"/model.part.* /tmp/parts/ 2>/dev/null
run() {  # one command: its summary lines and whole-process wall time
  local t0=$EPOCHREALTIME; timeout 300 "$@" > /tmp/last.txt 2>&1; local rc=$?; local t1=$EPOCHREALTIME
  grep -E "^PPL|^tokens/s|^kv cache|^error|^internal|^cuda stage|^  |^eval" /tmp/last.txt
  echo "rc=$rc whole-process $(python3 -c "print(f'{$t1-$t0:.2f}')") s: ${*#$Q }"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
case $STEP in
  tests) QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 300 /tmp/kit/test_cuda --gtest_brief=1 2>&1 | tail -40 ;;
  part) ls -la /tmp/parts ;;
  kv)
    M=/tmp/model.gguf
    [ -f $M ] || cat /tmp/parts/model.part.* > $M
    echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $M" | sha256sum -c || exit 1
    for kv in "f16" "affine:bits=4" "kivi:bits=2" "turboquant_mse:bits=3" "kivi:bits=2 --kv-mode decode" \
              "affine:bits=4,r=64 --kv-mode decode" "turboquant_mse:bits=2.5"; do
      run $Q eval-ppl --model $M --text $T --chunks 64 --device cuda --kv $kv
      run $Q eval-ppl --model $M --text $T --chunks 64 --compute bf16 --kv $kv
    done
    for kv in "f16" "affine:bits=4" "kivi:bits=2" "turboquant_mse:bits=3" "kivi:bits=2 --kv-mode decode" "f16"; do
      run $Q eval-ppl --model $M --text $T --ctx 4096 --device cuda --kv $kv
    done
    run env QT_CUDA_PROFILE=1 $Q eval-ppl --model $M --text $T --ctx 4096 --device cuda --kv turboquant_mse:bits=3 ;;
  kvx)  # where GPU and CPU differ: modes, batch, keys vs values, windows
    M=/tmp/model.gguf
    [ -f $M ] || cat /tmp/parts/model.part.* > $M
    echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $M" | sha256sum -c || exit 1
    for a in "--kv affine:bits=4 --kv-mode decode" "--kv affine:bits=4 --batch 1" "--kv affine:bits=4,r=64" \
             "--kv-k affine:bits=4 --kv-v f16" "--kv-k f16 --kv-v affine:bits=4"; do
      run $Q eval-ppl --model $M --text $T --chunks 64 --device cuda $a
    done
    for a in "--kv affine:bits=4 --kv-mode decode" "--kv affine:bits=4,r=64" "--kv-k affine:bits=4 --kv-v f16" \
             "--kv-k f16 --kv-v affine:bits=4" "--kv affine:bits=4 --ubatch 64"; do
      run $Q eval-ppl --model $M --text $T --chunks 64 --compute bf16 $a
    done ;;
  gpu)  # the GPU side only (the CPU references of `kv` and `kvx` do not change with the GPU code)
    M=/tmp/model.gguf
    [ -f $M ] || cat /tmp/parts/model.part.* > $M
    echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $M" | sha256sum -c || exit 1
    QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 300 /tmp/kit/test_cuda 2>&1 | grep -E "tiny |PASSED|FAILED|OK \]"
    for a in "f16" "affine:bits=4" "kivi:bits=2" "turboquant_mse:bits=3" "kivi:bits=2 --kv-mode decode" \
             "affine:bits=4,r=64 --kv-mode decode" "turboquant_mse:bits=2.5" "affine:bits=4,r=64" \
             "turboquant_mse:bits=3,r=64 --kv-mode decode"; do
      run $Q eval-ppl --model $M --text $T --chunks 64 --device cuda --kv $a
    done
    run $Q eval-ppl --model $M --text $T --chunks 64 --device cuda --kv-k affine:bits=4 --kv-v f16
    run $Q eval-ppl --model $M --text $T --chunks 64 --compute bf16 --kv turboquant_mse:bits=3,r=64 --kv-mode decode
    for kv in "f16" "affine:bits=4" "kivi:bits=2" "turboquant_mse:bits=3" "kivi:bits=2 --kv-mode decode" "f16" \
              "affine:bits=4" "kivi:bits=2" "turboquant_mse:bits=3"; do
      run $Q eval-ppl --model $M --text $T --ctx 4096 --device cuda --kv $kv
    done
    run env QT_CUDA_PROFILE=1 $Q eval-ppl --model $M --text $T --ctx 4096 --device cuda --kv f16
    run env QT_CUDA_PROFILE=1 $Q eval-ppl --model $M --text $T --ctx 4096 --device cuda --kv affine:bits=4 ;;
  8b)  # the Llama-3-8B-shaped random checkpoint (made here): bf16 against NF4 (weight-only, decoded per GEMM)
    QT_REQUIRE_GPU=1 QT_BIN=$Q timeout 300 /tmp/kit/test_cuda 2>&1 | grep -E "PASSED|FAILED|OK \]"
    $Q bench --peak --device cuda 2>&1 | tail -4
    [ -d /tmp/l8b ] || python3 $R/scripts/make_test_checkpoint.py --shape llama3-8b --tokenizer-from $K/tok --out /tmp/l8b > /dev/null
    [ -d /tmp/l8b-nf4 ] || run $Q convert --in /tmp/l8b --out /tmp/l8b-nf4 --scheme nf4 --group-size 64 --max-shard-size 2GB
    run $Q eval-ppl --model /tmp/l8b-nf4 --text $T --device cuda
    run $Q eval-ppl --model /tmp/l8b --text $T --device cuda
    run $Q eval-ppl --model /tmp/l8b-nf4 --text $T --device cuda --batch 8
    run $Q eval-ppl --model /tmp/l8b --text $T --device cuda --batch 8
    run env QT_CUDA_PROFILE=1 $Q eval-ppl --model /tmp/l8b-nf4 --text $T --device cuda --batch 8 ;;
  8bkv)  # (earlier call) KV caches at ctx 4096 on the 8B shape, 16 chunks
    run $Q eval-ppl --model /tmp/l8b --text $T --device cuda --ctx 4096 --chunks 16
    run $Q eval-ppl --model /tmp/l8b --text $T --device cuda --ctx 4096 --chunks 16 --kv turboquant_mse:bits=3
    run $Q eval-ppl --model /tmp/l8b --text $T --device cuda --ctx 4096 --chunks 16 --kv kivi:bits=2 ;;
  nf4)  # SmolLM2 as NF4 (blocks of 64): GPU against CPU at 64 chunks
    M=/tmp/model.gguf
    [ -f $M ] || cat /tmp/parts/model.part.* > $M
    echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $M" | sha256sum -c || exit 1
    run $Q convert --in $M --out /tmp/n4 --scheme nf4 --group-size 64
    run $Q eval-ppl --model /tmp/n4 --text $T --chunks 64 --device cuda
    run $Q eval-ppl --model /tmp/n4 --text $T --chunks 64 --compute bf16 --kv f16
    run $Q eval-ppl --model /tmp/n4 --text $T --chunks 64 --kv f16
    run $Q eval-ppl --model /tmp/n4 --text $T --device cuda ;;
  *) echo "usage: $0 KIT tests|part|kv|kvx|gpu|8b|nf4" >&2; exit 2 ;;
esac
