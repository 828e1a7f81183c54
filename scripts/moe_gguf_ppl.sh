#!/usr/bin/env bash
# llama-perplexity on quanttool's GGUF of the tiny mixture-of-experts models (qwen3moe, and mixtral
# as llama.cpp's "llama" with 8 experts) against quanttool's own eval-ppl on the same file
# (results/gguf.md §Mixture of experts).
#   LLAMA_BIN=/path/llama.cpp/build/bin [QT=build/quanttool] [WORK=/tmp/gguf-moe] bash scripts/moe_gguf_ppl.sh
# The files: tests/golden/gguf_moe/tiny-<name>.bf16.gguf (llama.cpp's converter, with the 64-token
# SentencePiece vocabulary of letters of tests/golden/make_gguf_arch_goldens.py) through
# `convert --format gguf --gguf-type f32` and `--gguf-type q4_k_m`. The text: wiki.test.raw
# lower-cased and cut to letters and spaces, which that vocabulary covers, so both tools read the
# same tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
L=${LLAMA_BIN:?llama.cpp build/bin folder}
QT=${QT:-build/quanttool}
W=${WORK:-/tmp/gguf-moe}
mkdir -p "$W"
python3 - "$W/text.txt" <<'PY'
import re, sys
t = open("data/wikitext-2/wiki.test.raw").read()[:60000].lower()
t = re.sub(r" +", " ", re.sub(r"[^a-z ]+", " ", t)).strip()
open(sys.argv[1], "w").write(t[:20000])
PY
export LD_LIBRARY_PATH="$L:${LD_LIBRARY_PATH:-}"
ctx=64 chunks=16
printf "%-9s %-7s %4s %12s %12s %10s\n" model type ctx llama.cpp quanttool rel.diff
for name in qwen3moe mixtral8; do
  for type in f32 q4_k_m; do
    f="$W/$name.$type.gguf"
    "$QT" convert --in "tests/golden/gguf_moe/tiny-$name.bf16.gguf" --out "$f" --format gguf --gguf-type "$type" \
      --force >/dev/null
    ours=$("$QT" eval-ppl --model "$f" --text "$W/text.txt" --ctx "$ctx" --chunks "$chunks" --threads 2 |
      awk '$1=="PPL"{print $2}')
    # The running value after the last chunk is the final estimate (written to a file: through a
    # pipe, llama.cpp's asynchronous logger at times loses its last lines).
    "$L/llama-perplexity" -m "$f" -f "$W/text.txt" -c "$ctx" -b "$ctx" --chunks "$chunks" -t 2 >"$W/$name.$type.log" 2>&1
    theirs=$(grep -o "\[$chunks\][0-9.]*" "$W/$name.$type.log" | tail -1 | cut -d] -f2)
    printf "%-9s %-7s %4s %12s %12s %10.1e\n" "$name" "$type" "$ctx" "$theirs" "$ours" \
      "$(python3 -c "print(abs($ours/$theirs-1))")"
  done
done
