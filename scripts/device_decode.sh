#!/usr/bin/env bash
# Decode speed of two quanttool binaries side by side on the device machine's CPU: writes the
# 8-layer Llama-3-8B-shaped checkpoint, converts it to each layout, then runs `bench --decode` with
# the binaries alternated (A B A B) at each thread count, and `bench --gemv` where asked.
# Usage: scripts/device_decode.sh BASE_BIN NEW_BIN TOKENIZER_DIR OUT_LOG
# Environment: LAYOUTS (default "a4 a8 nf4 q4_0"), THREADS (default "16"), ROUNDS (default 2),
# GEMV_THREADS (bench --gemv thread counts, default none), EXTRA (more bench --decode flags).
set -euo pipefail
base=$1 new=$2 tok=$3 log=$4
layouts=${LAYOUTS:-a4 a8 nf4 q4_0}
threads=${THREADS:-16}
rounds=${ROUNDS:-2}
ck=/tmp/l8b8
exec > >(tee -a "$log") 2>&1
lscpu | grep -E "^CPU\(s\)|Model name|NUMA node\(s\)"
echo "base $base new $new"
[ -d $ck ] || python3 scripts/make_test_checkpoint.py --shape llama3-8b --layers 8 --tokenizer-from "$tok" --out $ck \
  --workers 8 >/dev/null
model_of() {
  case $1 in
    a4) echo $ck-a4 ;; a8) echo $ck-a8 ;; nf4) echo $ck-nf4 ;; w8) echo $ck-w8 ;; bf16) echo $ck ;;
    *) echo $ck.$1.gguf ;;
  esac
}
for l in $layouts; do
  m=$(model_of "$l")
  [ -e "$m" ] && continue
  case $l in
    a4) "$new" convert --in $ck --out "$m" --scheme affine --bits 4 --group-size 64 ;;
    a8) "$new" convert --in $ck --out "$m" --scheme affine --bits 8 --group-size 64 ;;
    nf4) "$new" convert --in $ck --out "$m" --scheme nf4 ;;
    w8) "$new" convert --in $ck --out "$m" --scheme int8 --group-size 0 ;;
    bf16) ;;
    *) "$new" convert --in $ck --out "$m" --format gguf --gguf-type "$l" ;;
  esac | tail -1
done
for t in ${GEMV_THREADS:-}; do
  for r in $(seq "$rounds"); do
    for b in base new; do
      bin=$base; [ $b = new ] && bin=$new
      echo "== gemv $b threads $t r$r"
      "$bin" bench --gemv --gemv-columns affine4-g64-bf16 affine8-g64-bf16 nf4-b64-bf16 --threads "$t" | tail -7
    done
  done
done
for t in $threads; do
  for r in $(seq "$rounds"); do
    for l in $layouts; do
      for b in base new; do
        bin=$base; [ $b = new ] && bin=$new
        extra=${EXTRA:-}
        [ $l = bf16 ] && extra="$extra --compute bf16"
        out=$("$bin" bench --decode --model "$(model_of "$l")" --prompt 8 --gen 32 --threads "$t" $extra 2>&1)
        echo "== $b $l threads $t r$r: $(echo "$out" | grep -E '^model' | sed 's/.*linears //')" \
          "$(echo "$out" | grep -E '^decode' | tr -s ' ')" "$(echo "$out" | grep -E '^bandwidth' | tr -s ' ')"
      done
    done
  done
done
