#!/usr/bin/env bash
# PPL bit-identity of two quanttool binaries on SmolLM2, 64 chunks of wiki.test.raw, 2 threads:
# f32, --compute bf16, W8A8, affine-4 g64 and three KV methods. Prints "name which ppl mean_nll"
# with Python's repr of the JSON doubles (every bit), one line per run.
# Usage: scripts/ppl_identity.sh BASE_BIN NEW_BIN [WORKDIR]
set -u
B=$1; N=$2; W=${3:-$(mktemp -d)}
R=$(cd "$(dirname "$0")/.." && pwd)
M=$R/models/SmolLM2-135M-Instruct.Q4_1.gguf; T=$R/data/wikitext-2/wiki.test.raw
cd "$W"
[ -d w8a8 ] || "$B" convert --in "$M" --out w8a8 --scheme int8 --group-size 0 >/dev/null
[ -d a4 ] || "$B" convert --in "$M" --out a4 --scheme affine --bits 4 --group-size 64 >/dev/null
run() {
  local name=$1; shift
  for which in base new; do
    local X=$B; [ $which = new ] && X=$N
    "$X" eval-ppl --text "$T" --chunks 64 --threads 2 --json "$name.$which.json" "$@" >/dev/null 2>&1
    python3 -c "import json;d=json.load(open('$name.$which.json'));print('$name $which', repr(d['ppl']), repr(d['mean_nll']))"
  done
}
run f32 --model "$M"
run bf16 --model "$M" --compute bf16
run w8a8 --model w8a8
run affine4 --model a4
run kivi4 --model "$M" --kv kivi:bits=4
run tq3 --model "$M" --kv-k turboquant_mse:bits=3 --kv-v turboquant_mse:bits=3
run polar --model "$M" --kv-k polar:bits=4 --kv-v kivi:bits=4
