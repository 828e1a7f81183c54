#!/usr/bin/env bash
# llama-perplexity on gpt-oss GGUFs against quanttool's own eval-ppl on the same file
# (results/gguf.md §gpt-oss and MXFP4).
#   LLAMA_BIN=/path/llama.cpp/build/bin [QT=build/quanttool] [WORK=/tmp/gguf-gptoss] bash scripts/gptoss_gguf_ppl.sh
# The files: tests/golden/gguf_gptoss/tiny-gpt-oss.bf16.gguf (llama.cpp's converter, with the
# 64-token SentencePiece vocabulary of letters of tests/golden/make_gguf_arch_goldens.py) through
# `convert --format gguf --gguf-type f32` and `--gguf-type mxfp4_moe`, and the converter's own file
# of the MXFP4 folder (experts MXFP4 as released, the rest bf16). The text: wiki.test.raw lower-cased
# and cut to letters and spaces, which that vocabulary covers, so both tools read the same tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
L=${LLAMA_BIN:?llama.cpp build/bin folder}
QT=${QT:-build/quanttool}
W=${WORK:-/tmp/gguf-gptoss}
mkdir -p "$W"
python3 - "$W/text.txt" <<'PY'
import re, sys
t = open("data/wikitext-2/wiki.test.raw").read()[:60000].lower()
t = re.sub(r" +", " ", re.sub(r"[^a-z ]+", " ", t)).strip()
open(sys.argv[1], "w").write(t[:20000])
PY
export LD_LIBRARY_PATH="$L:${LD_LIBRARY_PATH:-}"
G=tests/golden/gguf_gptoss
for type in f32 mxfp4_moe; do
  "$QT" convert --in "$G/tiny-gpt-oss.bf16.gguf" --out "$W/gpt-oss.$type.gguf" --format gguf --gguf-type "$type" \
    --force >/dev/null
done
cp "$G/tiny-gpt-oss-mxfp4.bf16.gguf" "$W/gpt-oss-mxfp4.converter.gguf"
ctx=64 chunks=16
# Two pairs: llama.cpp's default cache (f16 K/V) against our --kv f16, and its f32 cache without
# flash attention against our f32 cache.
printf "%-26s %4s %5s %12s %12s %10s\n" file ctx cache llama.cpp quanttool rel.diff
for f in gpt-oss.f32 gpt-oss.mxfp4_moe gpt-oss-mxfp4.converter; do
  for cache in f16 f32; do
    lopt=""
    [ "$cache" = f32 ] && lopt="-ctk f32 -ctv f32 -fa off"
    ours=$("$QT" eval-ppl --model "$W/$f.gguf" --text "$W/text.txt" --ctx "$ctx" --chunks "$chunks" --threads 2 \
      --kv "$cache" | awk '$1=="PPL"{print $2}')
    # The final estimate; llama.cpp's asynchronous logger at times loses its last lines at exit
    # (even into a file), so a run without them is repeated.
    theirs=""
    for _ in 1 2 3 4 5; do
      # shellcheck disable=SC2086
      "$L/llama-perplexity" -m "$W/$f.gguf" -f "$W/text.txt" -c "$ctx" -b "$ctx" --chunks "$chunks" -t 2 $lopt \
        >"$W/$f.$cache.log" 2>&1
      theirs=$(grep -o "Final estimate: PPL = [0-9.]*" "$W/$f.$cache.log" | awk '{print $NF}' || true)
      [ -n "$theirs" ] && break
    done
    printf "%-26s %4s %5s %12s %12s %10.1e\n" "$f" "$ctx" "$cache" "$theirs" "$ours" \
      "$(python3 -c "print(abs($ours/$theirs-1))")"
  done
done
