// Text generation's token loop: the prompt in one forward (only its last row's logits), then one
// token at a time, each chosen by a Sampler (libquant/eval/sampling.h), until a stop token, the
// token limit, or the caller says stop. The forward is a callback, so the CPU model (its KV cache
// and single-token decode step) and other backends share the loop and its timing.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "libquant/eval/sampling.h"

namespace qt {

class LlamaModel;
class KVCache;

// Runs ids[0..n) as the next positions of the sequence and writes the logits of the last one
// ([vocab]) to `logits`.
using StepFn = std::function<void(const int32_t* ids, int n, float* logits)>;
// Called with each generated token that is not a stop token; returns false to end generation
// (a stop string appeared in the text).
using TokenFn = std::function<bool(int32_t id)>;

struct GenerateOptions {
  int max_tokens = 256;
  SamplingOptions sampling;
  std::vector<int32_t> stop_ids;  // EOS, the chat template's end-of-turn token
};

struct GenerateResult {
  std::vector<int32_t> ids;  // generated tokens, a final stop token included (as transformers' generate)
  int prompt_tokens = 0;
  double prefill_s = 0;      // the prompt's forward
  double first_token_s = 0;  // start to the first generated token (prefill + sampling)
  double decode_s = 0;       // the first generated token to the last: ids.size() − 1 forwards
  bool stopped_by_token = false, stopped_by_caller = false;
  double prompt_tps() const { return prefill_s > 0 ? prompt_tokens / prefill_s : 0; }
  double decode_tps() const { return decode_s > 0 && ids.size() > 1 ? double(ids.size() - 1) / decode_s : 0; }
};

GenerateResult generate(const StepFn& step, int vocab, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                        const TokenFn& on_token);

// The CPU model's step: forward() into `cache` (which must start empty), logits of the last row
// only; a single token takes the model's decode step.
StepFn model_step(LlamaModel& model, KVCache& cache);

}  // namespace qt
