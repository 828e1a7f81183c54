#include "libquant/eval/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "formats/error.h"

namespace qt {

void check_sampling_options(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    user_error("--temp: must be 0 (greedy) or positive, got {}", o.temperature);
  if (o.top_k < 0) user_error("--top-k: must be at least 0 (0: no limit), got {}", o.top_k);
  if (!(o.top_p > 0 && o.top_p <= 1)) user_error("--top-p: must be in (0, 1], got {}", o.top_p);
}

int32_t argmax_token(const float* logits, int n_vocab) {
  int32_t best = 0;
  for (int32_t v = 1; v < n_vocab; ++v)
    if (logits[v] > logits[best]) best = v;
  return best;
}

Sampler::Sampler(const SamplingOptions& o) : o_(o), rng_(o.seed) { check_sampling_options(o); }

int32_t Sampler::sample(const float* logits, int n_vocab) {
  if (o_.temperature == 0) return argmax_token(logits, n_vocab);
  // Candidates by decreasing logit (ties: lower id first), so the cut-offs below are prefixes.
  std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  size_t keep = size_t(n_vocab);
  if (o_.top_k > 0 && size_t(o_.top_k) < keep) {
    keep = size_t(o_.top_k);
    std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(keep), ids.end(), by_logit);
  } else {
    std::sort(ids.begin(), ids.end(), by_logit);
  }
  // Softmax of logits / T over the kept candidates, in double (the draw compares against sums).
  std::vector<double> p(keep);
  const double top = double(logits[ids[0]]) / o_.temperature;
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp(double(logits[ids[i]]) / o_.temperature - top);
  for (double& x : p) x /= sum;
  if (o_.top_p < 1) {
    // transformers' TopP keeps the tokens whose cumulative probability from the *bottom* exceeds
    // 1 - p, i.e. the top tokens until their sum reaches p; the top token always stays.
    double cum = 0;
    size_t n = 0;
    while (n < keep) {
      cum += p[n++];
      if (cum >= double(o_.top_p)) break;
    }
    keep = n;
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i];
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace qt
