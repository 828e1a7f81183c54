#!/usr/bin/env bash
# Ours against llama.cpp's llama-perplexity on the device machine's Xeon (16 threads), Llama-3-8B shape.
# On the device, from the repository root: bash KIT/device_amx_llama.sh, with a copy of this file in KIT,
# a git-ignored folder two levels below the root (.dev/NAME/) holding:
#   cpu_new.xz   our CPU Release build, xz (its source folder, QT_BUILD_SRC, is linked to this checkout)
#   llama_pp.xz  llama-perplexity from scripts/build_llama_xeon.sh, xz
#   lib.tar.xz   lib/ with our build's shared libraries (libfmt, libpcre2-8, libgomp, libopenblas, ...)
#   tok/         SmolLM2's tokenizer.json / tokenizer_config.json
# The 8B shape with 4 layers (and 1 layer, for the per-layer cost): ours W8A8 / bf16 against llama.cpp
# Q8_0 / BF16 (GGUF written by quanttool convert), 16 threads, 8 chunks, ctx 512, in turn, whole
# process timed; then ours W8A8 --compute bf16 on the full text.
# Environment: W (work folder, /tmp/al), SHAPE (llama3-8b), PY (python3), BUDGET (seconds before the
# full-text run must end, 330), FULL (extra eval-ppl flags for it), QT_BUILD_SRC (the folder cpu_new was
# built in: the binary reads tests/ and data/ from there; unset: not linked).
set -o pipefail
K=$(cd "$(dirname "$0")" && pwd); R=$(cd "$K/../.." && pwd); S0=$EPOCHREALTIME
el() { python3 -c "print(f'{$EPOCHREALTIME-$S0:.0f}')"; }
W=${W:-/tmp/al}; SHAPE=${SHAPE:-llama3-8b}; mkdir -p $W/kit
if [ -n "${QT_BUILD_SRC:-}" ]; then mkdir -p "$(dirname "$QT_BUILD_SRC")" && ln -sfn "$R" "$QT_BUILD_SRC"; fi
for b in cpu_new llama_pp; do xz -dc "$K/$b.xz" > $W/kit/$b && chmod +x $W/kit/$b; done
tar -xJf "$K/lib.tar.xz" -C $W/kit
export LD_LIBRARY_PATH=$W/kit/lib
Q=$W/kit/cpu_new; L=$W/kit/llama_pp; T=$R/data/wikitext-2/wiki.test.raw
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket"; grep -m1 -E "^model\s" /proc/cpuinfo; uname -r; date -u
grep -o -w -E "amx_tile|amx_bf16|amx_int8|avx512_vnni|avx512_bf16|avx512vbmi" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
mk() { ${PY:-python3} $R/scripts/make_test_checkpoint.py --shape $SHAPE --layers $1 --tokenizer-from $K/tok --out $W/l8b$1 > $W/mk$1.txt 2>&1; }
( mk 4; $Q convert --in $W/l8b4 --out $W/l8b4-w8 --scheme int8 --group-size 0 > $W/c1.txt 2>&1 & 
  $Q convert --in $W/l8b4 --out $W/l8b4-q8_0.gguf --format gguf --gguf-type q8_0 > $W/c2.txt 2>&1 &
  $Q convert --in $W/l8b4 --out $W/l8b4-bf16.gguf --format gguf --gguf-type bf16 > $W/c3.txt 2>&1 & wait; echo > $W/r4 ) &
( mk 1; $Q convert --in $W/l8b1 --out $W/l8b1-w8 --scheme int8 --group-size 0 > $W/c4.txt 2>&1; echo > $W/r1 ) &
while [ ! -f $W/r4 ] || [ ! -f $W/r1 ]; do sleep 1; done
echo "== checkpoints ready ($(el) s)"; tail -qn1 $W/c1.txt $W/c2.txt $W/c3.txt $W/c4.txt; du -sh $W/l8b4* $W/l8b1*
run() { local t0=$EPOCHREALTIME; timeout ${TO:-100} "$@" > $W/last.txt 2>&1; local rc=$?; local t1=$EPOCHREALTIME
  grep -E "^PPL|^tokens/s|^error|^internal|Final estimate|failed" $W/last.txt | head -3 | tr '\n' ' '
  echo "rc=$rc whole $(python3 -c "print(f'{$t1-$t0:.2f}')") s: ${*#$W/kit/}"; }
C="--threads 16 --chunks 8 --text $T"; LC="-t 16 -c 512 --chunks 8 -f $T"
echo "== 8 chunks, in turn ($(el) s)"
for i in 1 2; do
  run $Q eval-ppl $C --model $W/l8b4-w8
  run $Q eval-ppl $C --model $W/l8b4-w8 --compute bf16
  run $Q eval-ppl $C --model $W/l8b4 --compute bf16
  run $L -m $W/l8b4-q8_0.gguf $LC; [ $i = 1 ] && grep -iE "AMX|system_info|n_seq|n_batch|flash|repack|CPU_REPACK" $W/last.txt | cut -c1-300 | head -12
  run $L -m $W/l8b4-bf16.gguf $LC; [ $i = 1 ] && grep -iE "AMX|model buffer|perplexity:.*seconds" $W/last.txt | cut -c1-200 | head -6
done
echo "== 1 layer ($(el) s)"
for i in 1 2; do run $Q eval-ppl $C --model $W/l8b1-w8 --compute bf16; run $Q eval-ppl $C --model $W/l8b4-w8 --compute bf16; done
E=$(el); echo "== full text, 4 layers, W8A8 --compute bf16 ($E s)"
TO=$(( ${BUDGET:-330} - E > 30 ? ${BUDGET:-330} - E : 30 )) run $Q eval-ppl --threads 16 --text $T --model $W/l8b4-w8 --compute bf16 ${FULL:-}
grep -E "chunks|tokens" $W/last.txt | head -5
echo "== end ($(el) s)"
