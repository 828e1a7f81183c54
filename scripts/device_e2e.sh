# End-to-end eval-ppl speed on the device machine's Xeon (AVX-512 VNNI), ours vs llama.cpp, in
# rounds (every command once per round, in the order given), whole-process wall seconds into
# $OUT/times.txt ("THREADS NAME ROUND SECONDS"; scripts/e2e_ratios.py takes the paired medians).
# The kit, in two calls since one call carries at most 64 MiB: an earlier call leaves the Q4_1
# GGUF's first part (model.part.aa) in /tmp/kit; this one carries build/devkit5 with the second part,
# wiki.test.raw, this script and bins.tar.xz (xz keeps the binaries to a few MiB): our quanttool
# (and an earlier build as quanttool_old, for before/after pairs), their shared libraries, and
# llama-perplexity / llama-quantize built here from llama.cpp 0c1e57098bba with GGML_NATIVE=OFF
# GGML_AVX512=ON GGML_AVX512_VNNI=ON GGML_AVX512_BF16=ON (and their libssl/libcrypto).
# Usage: bash build/devkit5/e2e.sh THREADS ROUNDS ["NAME ..."] [CHUNKS]
set -e
R=$PWD
mkdir -p /tmp/kit && cd /tmp/kit
cp -r $R/build/devkit5/* .
[ -f bins.tar.xz ] && python3 -c "import tarfile; tarfile.open('bins.tar.xz').extractall('.')"
[ -f model.gguf ] || cat model.part.aa model.part.ab > model.gguf
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  model.gguf" | sha256sum -c
export LD_LIBRARY_PATH=/tmp/kit
chmod +x quanttool* llama-perplexity llama-quantize
[ -f f32.gguf ] || ./llama-quantize --allow-requantize model.gguf f32.gguf F32 > q.log 2>&1
for q in BF16 Q8_0 Q4_0; do [ -f $q.gguf ] || ./llama-quantize f32.gguf $q.gguf $q >> q.log 2>&1; done
[ -d w8a8 ] || ./quanttool convert --in model.gguf --out w8a8 --scheme int8 --group-size 0 > /dev/null
[ -d w8e ] || ./quanttool convert --in model.gguf --out w8e --scheme int8 --group-size 0 --embedding-bits 8 --format native > /dev/null
[ -d a4 ] || ./quanttool convert --in model.gguf --out a4 --scheme affine --bits 4 --group-size 64 > /dev/null
TH=$1; N=${4:-8}; T=wiki.test.raw
declare -A C
C[ours-f32]="./quanttool eval-ppl --model model.gguf --text $T --chunks $N --threads $TH"
C[ours-bf16]="./quanttool eval-ppl --model model.gguf --text $T --chunks $N --threads $TH --compute bf16"
C[ours-w8a8]="./quanttool eval-ppl --model w8a8 --text $T --chunks $N --threads $TH"
C[ours-w8e]="./quanttool eval-ppl --model w8e --text $T --chunks $N --threads $TH"
C[ours-a4g64]="./quanttool eval-ppl --model a4 --text $T --chunks $N --threads $TH"
# An earlier build copied in as quanttool_old (before/after pairs of one change).
C[old-a4g64]="./quanttool_old eval-ppl --model a4 --text $T --chunks $N --threads $TH"
C[old-f32]="./quanttool_old eval-ppl --model model.gguf --text $T --chunks $N --threads $TH"
for q in f32 BF16 Q8_0 Q4_0; do C[llama-$q]="./llama-perplexity -m $q.gguf -f $T -c 512 --chunks $N -t $TH"; done
names=${3:-"ours-f32 llama-f32 ours-w8a8 llama-Q4_0 ours-a4g64 llama-Q8_0 ours-bf16 llama-BF16"}
mkdir -p $OUT/logs
for rep in $(seq 1 $2); do
  for n in $names; do
    t0=$EPOCHREALTIME; ${C[$n]} > /tmp/kit/last.log 2>&1; t1=$EPOCHREALTIME
    [ $rep = 1 ] && cp /tmp/kit/last.log $OUT/logs/$n-t$TH.log
    echo "$TH $n $rep $(python3 -c "print(f'{$t1-$t0:.3f}')")" | tee -a $OUT/times.txt
  done
done
grep -H "^PPL\|Final estimate\|tokens/s" $OUT/logs/*.log | head -30
