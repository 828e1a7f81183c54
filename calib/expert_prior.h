// Calibration statistics of a mixture-of-experts layer's experts. The router sends each expert only
// some of the calibration tokens, and an expert the text barely reaches (or never: llama.cpp's
// imatrix users meet experts with no data at all) would be quantized from a handful of rows — a
// rank-deficient GPTQ Hessian, a noisy importance — or, with none, by plain rounding. So every
// expert's sums get kExpertPriorTokens tokens' worth of its layer's expert average (Σ over the
// layer's experts of their sums / Σ of their token counts) added: a shrinkage prior that decides
// an unreached expert's statistics (exactly the average) and hardly moves a well-reached one
// (thousands of tokens). The same rule serves the importance (act-stats) and GPTQ's Hessians.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace qt::calib {

constexpr int64_t kExpertPriorTokens = 64;

// sums[e]: expert e's sum over its routed tokens (Σ x_j² per channel, or Σ xᵀx), empty when it saw
// none; counts[e] its token count. Adds the prior to every sum (an empty one becomes the prior).
// Returns the number of experts with fewer than kExpertPriorTokens tokens.
template <class T>
int add_expert_prior(const std::vector<std::vector<T>*>& sums, const std::vector<int64_t>& counts) {
  size_t n = 0;
  int64_t total = 0;
  for (size_t e = 0; e < sums.size(); ++e) n = std::max(n, sums[e]->size()), total += counts[e];
  if (total == 0 || n == 0) return 0;
  std::vector<T> mean(n, T(0));  // T, not double: a down_proj Hessian of 14336² floats is 0.8 GB
  for (const std::vector<T>* s : sums)
    for (size_t i = 0; i < s->size(); ++i) mean[i] += (*s)[i];
  const T w = T(double(kExpertPriorTokens) / double(total));
  int few = 0;
  for (size_t e = 0; e < sums.size(); ++e) {
    std::vector<T>& s = *sums[e];
    if (s.empty()) s.assign(n, T(0));
    for (size_t i = 0; i < n; ++i) s[i] += mean[i] * w;
    few += counts[e] < kExpertPriorTokens;
  }
  return few;
}

}  // namespace qt::calib
