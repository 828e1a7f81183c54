// Token generation speed, as llama-bench and turboquant-mlx's throughput table measure it: prefill
// a prompt, then generate one token at a time (greedy: each step feeds back the argmax of the last
// logits), appending every token's K/V to the cache — a quantized one too.
#pragma once
#include <cstdint>
#include <vector>

#include "libquant/model/llama.h"

namespace qt::bench {

struct DecodeResult {
  int prompt = 0, gen = 0;
  double prefill_s = 0, decode_s = 0;  // wall seconds of the prompt and of the gen steps
  std::vector<int32_t> generated;      // the gen tokens, in order
  double prefill_tps() const { return prefill_s > 0 ? prompt / prefill_s : 0; }
  double decode_tps() const { return decode_s > 0 ? gen / decode_s : 0; }
};

// Runs `prompt` through `model` in batches of `ubatch` into `cache` (which must be empty and hold
// prompt.size() + gen positions), then `gen` single-token steps. UserError for an empty prompt.
DecodeResult run_decode(LlamaModel& model, KVCache& cache, const std::vector<int32_t>& prompt, int gen, int ubatch);

}  // namespace qt::bench
