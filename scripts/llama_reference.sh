#!/bin/bash
# The llama.cpp rows of results/weights.md and results/kv.md (64 chunks, 2 threads), whose logs are in
# results/llama/: llama-quantize the Q4_1 file to F32 and from that to Q8_0/Q5_0/Q4_0; KLD of each
# (and of the Q4_1 file itself) against the F32 model's logits with its default f16 cache; the q8_0
# and q4_0 caches (-fa on) on the F32 model against the same base. llama.cpp is built separately
# (not part of this repository; the version and build are in results/llama.md):
#   LLAMA_BIN=/path/llama.cpp/build/bin WORK=/tmp/llama-ref bash scripts/llama_reference.sh
set -x
L=${LLAMA_BIN:?llama.cpp build/bin folder}
T=$(realpath ${TEXT:-$(dirname "$0")/../data/wikitext-2/wiki.test.raw})
M=$(realpath ${MODEL:-$(dirname "$0")/../models/SmolLM2-135M-Instruct.Q4_1.gguf})
mkdir -p ${WORK:?folder for the GGUFs and logs}
cd ${WORK:?folder for the GGUFs and logs}
[ -f f32.gguf ] || $L/llama-quantize --allow-requantize $M f32.gguf F32 > q-f32.log 2>&1
for t in Q8_0 Q5_0 Q4_0; do [ -f $t.gguf ] || $L/llama-quantize f32.gguf $t.gguf $t > q-$t.log 2>&1; done
cp -n $M Q4_1.gguf
[ -f base.kld ] || $L/llama-perplexity -m f32.gguf -f $T -c 512 --chunks 64 -t 2 --kl-divergence-base base.kld > base.log 2>&1
for t in Q8_0 Q5_0 Q4_0 Q4_1; do $L/llama-perplexity -m $t.gguf -f $T -c 512 --chunks 64 -t 2 --kl-divergence-base base.kld --kl-divergence > w-$t.log 2>&1; done
for t in q8_0 q4_0; do $L/llama-perplexity -m f32.gguf -f $T -c 512 --chunks 64 -t 2 -fa on -ctk $t -ctv $t --kl-divergence-base base.kld --kl-divergence > kv-$t.log 2>&1; done
echo done
