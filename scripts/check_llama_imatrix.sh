#!/usr/bin/env bash
# llama-quantize takes the imatrix files quanttool writes (a llama.cpp cross-check, outside the test
# suite: CI has no llama.cpp). On the tiny golden model (tests/golden/imatrix/tiny-spm.gguf), our
# act-stats over the same 4 chunks of 64 tokens llama-imatrix used, written as llama.cpp's GGUF and
# legacy .dat imatrix, then `llama-quantize --imatrix` to Q4_0: it must load all 15 entries and find
# one for every block weight and the output.
#   LLAMA_BIN=/path/to/llama.cpp/bin bash scripts/check_llama_imatrix.sh
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_BIN:?set LLAMA_BIN to the bin folder of llama.cpp}"
M=tests/golden/imatrix/tiny-spm.gguf
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for f in gguf dat; do
  build/quanttool calibrate --method act-stats --model $M --text data/wikitext-2/wiki.valid.tokens.txt --ctx 64 \
    --chunks 4 --format $f --out "$W/ours.$f" > /dev/null
  "$LLAMA_BIN/llama-quantize" --imatrix "$W/ours.$f" $M "$W/q.$f.gguf" Q4_0 2 > "$W/log.$f" 2>&1
  grep -q "loaded 15 importance matrix entries" "$W/log.$f" || { cat "$W/log.$f"; echo "FAIL: $f: entries"; exit 1; }
  if grep -qE "did not find weights for (blk|output)" "$W/log.$f"; then
    cat "$W/log.$f"; echo "FAIL: $f: a weight without an entry"; exit 1
  fi
  echo "ok: llama-quantize took our $f imatrix (15 entries)"
done
