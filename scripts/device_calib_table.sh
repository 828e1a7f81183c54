# The calibrated-quantization rows of results/calib.md, run on the device
# machine's 16-core CPU: every row converted from the SmolLM2 Q4_1 GGUF with our calibration flags,
# then `eval-ppl --method llama --ctx 512 --chunks 64` on wiki.test.raw with the GGUF itself as the
# KL baseline. Eight rows at a time, 2 threads each (GPTQ on 32 chunks of 512 tokens). Results: $OUT/rows.tar.gz (one JSON and one
# convert log per row), read by scripts/calib_table.py.
# The kit (build/devkit-calib, carried): quanttool and its shared libraries (bins.tar.xz), the
# model's third part (earlier calls left model.part.aa and .ab in /tmp/kit: one call carries at most
# 64 MiB), the act-stats file (calibrate --method act-stats --chunks 64 on wiki.valid.tokens.txt).
# Usage: bash scripts/device_calib_table.sh [ROW ...]
set -e
R=$PWD
mkdir -p /tmp/kit && cd /tmp/kit
KIT=${QT_KIT:-$R/build/devkit-calib}
cp -r $KIT/* .
python3 -c "import tarfile; tarfile.open('bins.tar.xz').extractall('.')"
[ -f model.gguf ] || cat model.part.aa model.part.ab model.part.ac > model.gguf
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  model.gguf" | sha256sum -c
export LD_LIBRARY_PATH=/tmp/kit
chmod +x quanttool
T=$R/data/wikitext-2/wiki.test.raw V=$R/data/wikitext-2/wiki.valid.tokens.txt S=/tmp/kit/stats.safetensors
RC=${QT_RECIPES:-$R/recipes}
G="--gptq --calib $V --calib-chunks 32"
declare -A C
C[w8a8]="--scheme int8 --group-size 0"
C[w8a8-gptq]="--scheme int8 --group-size 0 $G"
C[w8a8-smooth]="--scheme int8 --group-size 0 --smooth $S --alpha 0.5"
C[w4a8-gptq]="--scheme int4 --group-size 0 $G"
C[w4a8-gptq-imat]="--scheme int4 --group-size 0 $G --imatrix $S"
C[w4a8-g128-gptq-imat]="--scheme int4 --group-size 128 $G --imatrix $S"
C[a4-rtn]="--scheme affine --bits 4 --group-size 64 --dtype bf16"
C[a4-imat]="--scheme affine --bits 4 --group-size 64 --dtype bf16 --imatrix $S"
C[a4-gptq-imat]="--scheme affine --bits 4 --group-size 64 --dtype bf16 $G --imatrix $S"
C[a4-mix-rtn]="--scheme affine --bits 4 --group-size 64 --dtype bf16 --recipe $RC/q4-mix.json"
C[a4-mix-imat]="--scheme affine --bits 4 --group-size 64 --dtype bf16 --recipe $RC/q4-mix.json --imatrix $S"
C[a4-mix-gptq-imat]="--scheme affine --bits 4 --group-size 64 --dtype bf16 --recipe $RC/q4-mix.json $G --imatrix $S"
C[a4-g32-e6-gptq-imat]="--scheme affine --bits 4 --group-size 32 --dtype bf16 --embedding-bits 6 $G --imatrix $S"
C[a3-mix-gptq-imat]="--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe $RC/q3-mix.json $G --imatrix $S"
C[a3-mix-rtn]="--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe $RC/q3-mix.json"
C[a3-g32-mix-gptq-imat]="--scheme affine --bits 3 --group-size 32 --dtype bf16 --recipe $RC/q3-mix.json --embedding-bits 6 $G --imatrix $S"
C[a3-mix-imat]="--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe $RC/q3-mix.json --imatrix $S"
C[a4-gptq-imat-actorder]="--scheme affine --bits 4 --group-size 64 --dtype bf16 $G --act-order --imatrix $S"
C[w4a8-keepemb-gptq-imat]="--scheme int4 --group-size 0 --recipe $RC/keep-embedding.json $G --imatrix $S"
C[w8a8-smooth-0.8]="--scheme int8 --group-size 0 --smooth $S --alpha 0.8"
C[w8a8-smooth-gptq]="--scheme int8 --group-size 0 --smooth $S --alpha 0.5 $G"
C[nf4-gptq-imat]="--scheme nf4 --group-size 64 --format native --embedding-bits 4 $G --imatrix $S"
# searched SmoothQuant α, AWQ (4 chunks of the calibration text for the searches)
A="--calib $V --search-chunks 4"
G2="--gptq --calib-chunks 32"
C[w8a8-smooth-auto]="--scheme int8 --group-size 0 --smooth $S --alpha auto $A"
C[w8a8-smooth-auto-gptq]="--scheme int8 --group-size 0 --smooth $S --alpha auto $A $G2"
C[w4a8-keepemb-awq-gptq-imat]="--scheme int4 --group-size 0 --recipe $RC/keep-embedding.json --awq $A $G2 --imatrix $S"
C[w4a8-awq-gptq-imat]="--scheme int4 --group-size 0 --awq $A $G2 --imatrix $S"
C[a3-mix-awq-gptq-imat]="--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe $RC/q3-mix.json --awq $A $G2 --imatrix $S"
C[a3-g32-mixm-gptq-imat]="--scheme affine --bits 3 --group-size 32 --dtype bf16 --recipe $RC/q3-mix-m.json --embedding-bits 6 $G --imatrix $S"
C[a3-g32-mixm-gptq-imat-actorder]="--scheme affine --bits 3 --group-size 32 --dtype bf16 --recipe $RC/q3-mix-m.json --embedding-bits 6 $G --act-order --imatrix $S"
C[a3-g32-mixl-gptq-imat]="--scheme affine --bits 3 --group-size 32 --dtype bf16 --recipe $RC/q3-mix-l.json --embedding-bits 6 $G --imatrix $S"
C[w4a8-keepemb-smoothauto-gptq-imat]="--scheme int4 --group-size 0 --recipe $RC/keep-embedding.json --smooth $S --alpha auto $A $G2 --imatrix $S"
C[w4a8-smoothauto-gptq-imat]="--scheme int4 --group-size 0 --smooth $S --alpha auto $A $G2 --imatrix $S"
C[w4a8-keepemb-awq-noclip-gptq-imat]="--scheme int4 --group-size 0 --recipe $RC/keep-embedding.json --awq --no-clip $A $G2 --imatrix $S"
C[a4-awq]="--scheme affine --bits 4 --group-size 64 --dtype bf16 --awq $A"
C[a4-awq-noclip-gptq-imat]="--scheme affine --bits 4 --group-size 64 --dtype bf16 --awq --no-clip $A $G2 --imatrix $S"
C[w8a8-smooth-auto8-gptq]="--scheme int8 --group-size 0 --smooth $S --alpha auto --calib $V --search-chunks 8 $G2"
C[w4a8-keepemb-smoothauto-gptq-imat-actorder]="--scheme int4 --group-size 0 --recipe $RC/keep-embedding.json --smooth $S --alpha auto $A $G2 --act-order --imatrix $S"
C[w4a8-keepemb-smoothauto8-gptq64-imat]="--scheme int4 --group-size 0 --recipe $RC/keep-embedding.json --smooth $S --alpha auto --calib $V --search-chunks 8 --gptq --calib-chunks 64 --imatrix $S"
C[w4a8-keepemb-awq-noclip-gptq-imat-actorder]="--scheme int4 --group-size 0 --recipe $RC/keep-embedding.json --awq --no-clip $A $G2 --act-order --imatrix $S"
C[w4a8-smoothauto-gptq-imat-actorder]="--scheme int4 --group-size 0 --smooth $S --alpha auto $A $G2 --act-order --imatrix $S"
C[a3-g32-mixl-gptq-imat-actorder]="--scheme affine --bits 3 --group-size 32 --dtype bf16 --recipe $RC/q3-mix-l.json --embedding-bits 6 $G --act-order --imatrix $S"
C[a3-mixl-gptq-imat]="--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe $RC/q3-mix-l.json $G --imatrix $S"
C[a3-mix-awq]="--scheme affine --bits 3 --group-size 64 --dtype bf16 --recipe $RC/q3-mix.json --awq $A"
C[a4-awq-gptq-imat]="--scheme affine --bits 4 --group-size 64 --dtype bf16 --awq $A $G2 --imatrix $S"
if [ $# -gt 0 ]; then rows=("$@"); else rows=("${!C[@]}"); fi
mkdir -p rows
job() {
  n=$1; shift
  s=$SECONDS
  ./quanttool convert --in model.gguf --out m-$n --force --threads 2 $@ > rows/$n.convert.log 2>&1
  echo "convert wall $((SECONDS - s)) s" >> rows/$n.convert.log
  ./quanttool eval-ppl --model m-$n --text $T --chunks 64 --threads 2 --kl-base-model model.gguf --json rows/$n.json > rows/$n.eval.log 2>&1
  echo "$n done"
}
export -f job; export T
# Every row at once (at most 8: 2 threads each on the 16 cores), each under the time limit.
for n in "${rows[@]}"; do timeout ${QT_ROWS_TIMEOUT:-540} bash -c 'job "$@"' _ $n ${C[$n]} & done
wait || true
tar czf $OUT/rows.tar.gz rows
lscpu | grep -E "Model name|Flags" | cut -c1-200 > $OUT/cpu.txt
