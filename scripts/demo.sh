#!/usr/bin/env bash
# The main job end to end: set-up, build, fetch SmolLM2-135M-Instruct, export it as a Hugging Face
# folder, inspect it, measure its wikitext-2 perplexity (llama.cpp methodology) from the exported
# folder, then quantize it (W8A8 compressed-tensors, MLX affine 4-bit, NF4) and print the table of
# PPL / KLD against the unquantized model / bits per weight / tokens/s.
# CHUNKS=all evaluates the whole text (minutes on 2 cores); default 16 chunks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
scripts/fetch-models.sh
DATA=${QT_DATA:-data}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=build/demo/smollm2-hf-f32
mkdir -p build/demo
build/quanttool convert --in "$MODEL" --out "$OUT" --dtype f32 --force
# (through a file: under pipefail, `inspect | head` dies of SIGPIPE when head stops reading first)
build/quanttool inspect "$OUT" > build/demo/inspect.txt
head -20 build/demo/inspect.txt
CHUNKS=${CHUNKS:-16}
chunk_flag=()
[ "$CHUNKS" = all ] || chunk_flag=(--chunks "$CHUNKS")
build/quanttool eval-ppl --model "$OUT" --text "$DATA/wikitext-2/wiki.test.raw" --method llama "${chunk_flag[@]}"

# The quantized rows (scripts/quality_table.py converts and evaluates each; KL against the source).
rows=unquantized,w8a8,affine4-g64,nf4
table_args=(--chunks "$CHUNKS")
[ "$CHUNKS" = all ] && table_args=(--full "$rows")
rm -rf build/demo/quality
python3 scripts/quality_table.py --work build/demo/quality "${table_args[@]}" --only "$rows" 2>/dev/null
