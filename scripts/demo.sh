#!/usr/bin/env bash
# The main job end to end on a fresh clone: set-up, build quanttool (the CLI only, not the tests),
# fetch SmolLM2-135M-Instruct, export it as a Hugging Face folder, then quantize it the plain way
# (round-to-nearest) and the calibrated way and print one table: PPL and KLD against the unquantized
# model on the first CHUNKS chunks of wiki.test.raw, bits per weight, and each model's own
# evaluation tokens/s (in a KL run the baseline's forward is timed apart and left out). Every step
# prints its time; the calibration statistics come from wiki.valid.tokens.txt, never the test text.
#
#   CHUNKS=16 (default) or all   chunks of 512 tokens evaluated
#   STATS_CHUNKS=8               act-stats chunks (SmoothQuant's and the imatrix statistics)
#   GPTQ_CHUNKS=8                GPTQ's calibration chunks
#   SEARCH_CHUNKS=1              SmoothQuant's α search chunks
#   LLAMA_BIN=DIR                llama.cpp's bin folder (llama-imatrix, llama-quantize): adds
#                                llama-quantize's Q4_K_M + imatrix beside ours
#   QT_DATA=DIR                  another data/ folder (the same layout)
set -euo pipefail
cd "$(dirname "$0")/.."
{  # read whole before it runs: a git pull during a run cannot change what runs
W=build/demo
mkdir -p "$W"
: > "$W/steps.tsv"
T0=$(date +%s.%N)
# step NAME CMD...: runs CMD, prints and records its wall time and the CPU time of its processes
# (user + system of the finished children, from bash's `times`, run in this shell, not a subshell).
step() {
  local name=$1 t wall cpu
  shift
  t=$(date +%s.%N)
  times > "$W/.cpu0"
  "$@"
  times > "$W/.cpu1"
  read -r wall cpu < <(awk -v t="$t" -v now="$(date +%s.%N)" '
    FNR == 2 { n = 0; for (i = 1; i <= 2; ++i) { split($i, a, "m"); n += a[1] * 60 + a[2] } c[FILENAME] = n }
    END { printf "%.1f %.1f\n", now - t, c[ARGV[2]] - c[ARGV[1]] }' "$W/.cpu0" "$W/.cpu1")
  printf '%s\t%s\t%s\n' "$name" "$wall" "$cpu" >> "$W/steps.tsv"
  printf '[demo] %-34s %7s s  (CPU %s s)\n' "$name" "$wall" "$cpu" >&2
}

step "set-up (packages)" scripts/setup.sh
step "build quanttool" scripts/build.sh quanttool
step "fetch model" scripts/fetch-models.sh

Q=build/quanttool
DATA=${QT_DATA:-data}
TEST=$DATA/wikitext-2/wiki.test.raw
V=$DATA/wikitext-2/wiki.valid.tokens.txt
SRC=models/SmolLM2-135M-Instruct.Q4_1.gguf
HF=$W/smollm2-hf-f32
S=$W/stats.safetensors
CHUNKS=${CHUNKS:-16}
STATS_CHUNKS=${STATS_CHUNKS:-8}
GPTQ_CHUNKS=${GPTQ_CHUNKS:-8}
SEARCH_CHUNKS=${SEARCH_CHUNKS:-1}
chunk_flag=()
[ "$CHUNKS" = all ] || chunk_flag=(--chunks "$CHUNKS")
rm -rf "$W/rows" && mkdir -p "$W/rows"
: > "$W/rows.tsv"

step "export HF folder (f32)" $Q convert --in "$SRC" --out "$HF" --dtype f32 --force >/dev/null
# (through a file: under pipefail, `inspect | head` dies of SIGPIPE when head stops reading first)
$Q inspect "$HF" > "$W/inspect.txt"
head -12 "$W/inspect.txt"

# quantize LABEL METHOD PREP MODEL_OUT CONVERT_FLAGS...: converts the source into MODEL_OUT (timed
# as step "quantize LABEL"), evaluates it against the source, and lists the row for the table.
# PREP: the other steps its preparation needed (act-stats), counted into its calibration time.
quantize() {
  local label=$1 method=$2 prep=$3 out=$4
  shift 4
  step "quantize $label" $Q convert --in "$SRC" --out "$out" --force "$@" > "$W/rows/$label.convert.log"
  evaluate "$label" "$method" "quantize $label${prep:+,$prep}" "$*" --model "$out" "${kl[@]}"
}
# evaluate LABEL METHOD PREP_STEPS FLAGS EVAL_ARGS...: eval-ppl into rows/LABEL.json, one table row.
evaluate() {
  local label=$1 method=$2 prep=$3 flags=$4
  shift 4
  step "evaluate $label" $Q eval-ppl --text "$TEST" "${chunk_flag[@]}" --json "$W/rows/$label.json" "$@" \
    > "$W/rows/$label.log"
  printf '%s\t%s\t%s\t%s\n' "$label" "$method" "$prep" "$flags" >> "$W/rows.tsv"
}

# KL rows run the source alongside as the baseline; its hidden states are kept by the first such run
# and read by the others (the same KLD, without its forward each time).
kl=(--kl-base-model "$SRC" --kl-base-cache "$W/rows/kl-base.bin")

# One act-stats pass (per input channel of every Linear: max |x| and mean x²) feeds SmoothQuant,
# the imatrix searches and the GGUF imatrix.
step "calibrate act-stats" $Q calibrate --method act-stats --model "$SRC" --text "$V" \
  --chunks "$STATS_CHUNKS" --out "$S" > "$W/rows/act-stats.log"

# W8A8: int8 per-channel weights, int8 per-token activations (compressed-tensors).
quantize w8a8-rtn "round-to-nearest" "" "$W/w8a8-rtn" --scheme int8 --group-size 0
# The unquantized row is this first run's baseline (the source in fp32, as the exported folder):
# its PPL and its own forward's time, read by the table from rows/w8a8-rtn.json.
printf 'unquantized\tnone: the baseline (fp32)\t\t\n' >> "$W/rows.tsv"
quantize w8a8-smoothquant "SmoothQuant, α searched per block" "calibrate act-stats" "$W/w8a8-sq" \
  --scheme int8 --group-size 0 --smooth "$S" --alpha auto --calib "$V" --search-chunks "$SEARCH_CHUNKS"
# 4-bit: MLX affine, groups of 64, bf16 scales and biases.
quantize affine4-rtn "round-to-nearest" "" "$W/a4-rtn" --scheme affine --bits 4 --group-size 64 --dtype bf16
quantize affine4-gptq-imatrix "GPTQ + imatrix" "calibrate act-stats" "$W/a4-gptq" \
  --scheme affine --bits 4 --group-size 64 --dtype bf16 --gptq --calib "$V" --calib-chunks "$GPTQ_CHUNKS" --imatrix "$S"
# GGUF: llama.cpp's Q4_K_M mix, importance-weighted block parameters.
quantize gguf-q4_k_m-imatrix "GGUF Q4_K_M + imatrix (ours)" "calibrate act-stats" "$W/q4_k_m.gguf" \
  --format gguf --gguf-type q4_k_m --imatrix "$S"
if [ -n "${LLAMA_BIN:-}" ]; then
  # llama.cpp's own: its imatrix on the same text and chunks, llama-quantize from our F32 GGUF.
  step "llama.cpp F32 GGUF" $Q convert --in "$SRC" --out "$W/f32.gguf" --format gguf --gguf-type f32 --force >/dev/null
  step "llama.cpp imatrix" "$LLAMA_BIN/llama-imatrix" -m "$W/f32.gguf" -f "$V" -c 512 --chunks "$STATS_CHUNKS" \
    -o "$W/imatrix.gguf" > "$W/rows/llama-imatrix.log" 2>&1
  step "quantize llama-q4_k_m-imatrix" "$LLAMA_BIN/llama-quantize" --imatrix "$W/imatrix.gguf" "$W/f32.gguf" \
    "$W/llama-q4_k_m.gguf" Q4_K_M > "$W/rows/llama-quantize.log" 2>&1
  evaluate llama-q4_k_m-imatrix "GGUF Q4_K_M + imatrix (llama-quantize)" \
    "quantize llama-q4_k_m-imatrix,llama.cpp imatrix,llama.cpp F32 GGUF" "llama-quantize --imatrix … Q4_K_M" \
    --model "$W/llama-q4_k_m.gguf" "${kl[@]}"
fi
# KV cache: the exported folder (fp32 weights) with KIVI's 4-bit cache (keys per channel, values
# per token, the newest 128 tokens kept fp16).
evaluate kv-kivi4 "KV cache KIVI-4 (weights fp32)" "" "--kv kivi:bits=4" \
  --model "$HF" --kv kivi:bits=4 "${kl[@]}"

python3 scripts/demo_table.py --work "$W" --total-since "$T0" \
  --subst "$S=S" --subst "$V=V" --subst "$W/=" \
  --note "$CHUNKS chunks of 512 tokens of wiki.test.raw; calibration on wiki.valid.tokens.txt (V): act-stats S $STATS_CHUNKS chunks, GPTQ $GPTQ_CHUNKS, α search $SEARCH_CHUNKS"
exit
}
