#!/usr/bin/env bash
# The main job end to end: set-up, build, fetch SmolLM2-135M-Instruct, export it as a Hugging Face
# folder, inspect it, and measure its wikitext-2 perplexity (llama.cpp methodology) from the
# exported folder. CHUNKS=all evaluates the whole text (minutes on 2 cores); default 32 chunks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
scripts/fetch-models.sh
DATA=${QT_SHARED_DATA:-../shared/data}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=build/demo/smollm2-hf-f32
mkdir -p build/demo
build/quanttool convert --in "$MODEL" --out "$OUT" --dtype f32 --force
build/quanttool inspect "$OUT" | head -20
CHUNKS=${CHUNKS:-32}
chunk_flag=()
[ "$CHUNKS" = all ] || chunk_flag=(--chunks "$CHUNKS")
build/quanttool eval-ppl --model "$OUT" --text "$DATA/wikitext-2/wiki.test.raw" --method llama "${chunk_flag[@]}"
