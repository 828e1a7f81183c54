// Next-token choice from a row of logits: greedy (temperature 0) or sampling with temperature,
// top-k and top-p (nucleus), in transformers' order (its TemperatureLogitsWarper, TopKLogitsWarper,
// TopPLogitsWarper; generation/logits_process.py): scale by 1/T, keep the k largest, keep the
// smallest set of the largest whose probability reaches p, then draw from the renormalized rest.
#pragma once
#include <cstdint>
#include <random>

namespace qt {

struct SamplingOptions {
  float temperature = 0;  // 0: greedy (argmax)
  int top_k = 0;          // 0: no limit
  float top_p = 1;        // 1: no limit
  uint64_t seed = 0;
};

// UserError naming the flag when an option is out of range (temperature < 0, top_k < 0,
// top_p outside (0, 1]).
void check_sampling_options(const SamplingOptions& o);

// The largest logit's id; the lowest id among equal ones (as torch.argmax on CPU).
int32_t argmax_token(const float* logits, int n_vocab);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& o);
  // The next token from logits [n_vocab]. Deterministic for a seed: the same logits in the same
  // order give the same draws.
  int32_t sample(const float* logits, int n_vocab);

 private:
  SamplingOptions o_;
  std::mt19937_64 rng_;
};

}  // namespace qt
