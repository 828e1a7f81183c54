#!/usr/bin/env bash
# llama-perplexity on quanttool's GGUF of the tiny Gemma 2, Gemma 3 and Phi-3 models against
# quanttool's own eval-ppl on the same file (results/gguf.md §Gemma and Phi-3).
#   LLAMA_BIN=/path/llama.cpp/build/bin [QT=build/quanttool] [WORK=/tmp/gguf-arch] bash scripts/gguf_arch_ppl.sh
# The files: tests/golden/gguf_arch/tiny-<arch>.bf16.gguf (llama.cpp's converter, with a 64-token
# SentencePiece vocabulary of letters) through `convert --format gguf --gguf-type f32`. The text:
# wiki.test.raw lower-cased and cut to letters and spaces, which that vocabulary covers, so both
# tools read the same tokens. Phi-3 at ctx 6: its sliding window is 6 and llama.cpp runs Phi-3
# without one (src/models/phi3.cpp), so the two agree only while the context fits in it.
set -euo pipefail
cd "$(dirname "$0")/.."
L=${LLAMA_BIN:?llama.cpp build/bin folder}
QT=${QT:-build/quanttool}
W=${WORK:-/tmp/gguf-arch}
mkdir -p "$W"
python3 - "$W/text.txt" <<'PY'
import re, sys
t = open("data/wikitext-2/wiki.test.raw").read()[:60000].lower()
t = re.sub(r" +", " ", re.sub(r"[^a-z ]+", " ", t)).strip()
open(sys.argv[1], "w").write(t[:20000])
PY
export LD_LIBRARY_PATH="$L:${LD_LIBRARY_PATH:-}"
printf "%-7s %4s %12s %12s %10s\n" arch ctx llama.cpp quanttool rel.diff
for spec in gemma2:64:16 gemma3:64:16 phi3:6:200; do
  IFS=: read -r arch ctx chunks <<<"$spec"
  f="$W/$arch.f32.gguf"
  "$QT" convert --in "tests/golden/gguf_arch/tiny-$arch.bf16.gguf" --out "$f" --format gguf --gguf-type f32 --force >/dev/null
  ours=$("$QT" eval-ppl --model "$f" --text "$W/text.txt" --ctx "$ctx" --chunks "$chunks" --threads 2 | awk '$1=="PPL"{print $2}')
  # The running value after the last chunk is the final estimate. (Written to a file: through a
  # pipe, llama.cpp's asynchronous logger at times loses its last lines.)
  "$L/llama-perplexity" -m "$f" -f "$W/text.txt" -c "$ctx" -b "$ctx" --chunks "$chunks" -t 2 >"$W/$arch.log" 2>&1
  theirs=$(grep -o "\[$chunks\][0-9.]*" "$W/$arch.log" | tail -1 | cut -d] -f2)
  printf "%-7s %4s %12s %12s %10.1e\n" "$arch" "$ctx" "$theirs" "$ours" "$(python3 -c "print(abs($ours/$theirs-1))")"
done
