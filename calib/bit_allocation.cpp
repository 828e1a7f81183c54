#include "calib/bit_allocation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "formats/error.h"

namespace qt::calib {

std::vector<double> water_fill(const std::vector<double>& w, double budget, double beta, double lo, double hi) {
  const size_t n = w.size();
  if (n == 0) return {};
  if (!(beta > 1)) user_error("--beta {}: must be greater than 1", beta);
  for (double x : w)
    if (!(x > 0) || !std::isfinite(x)) user_error("bit allocation: sensitivities must be positive and finite");
  const double lb = std::log(beta);
  std::vector<double> b(n);
  std::vector<int> clamp(n, 0);  // −1 at lo, +1 at hi
  for (int iter = 0; iter <= int(n); ++iter) {
    double free_budget = budget * double(n), sum_log = 0;
    int n_free = 0;
    for (size_t i = 0; i < n; ++i) {
      if (clamp[i] < 0)
        free_budget -= lo;
      else if (clamp[i] > 0)
        free_budget -= hi;
      else
        sum_log += std::log(w[i]) / lb, ++n_free;
    }
    const double theta = n_free ? (free_budget - sum_log) / n_free : 0;
    bool changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (clamp[i]) {
        b[i] = clamp[i] < 0 ? lo : hi;
        continue;
      }
      b[i] = theta + std::log(w[i]) / lb;
      if (b[i] < lo)
        clamp[i] = -1, changed = true;
      else if (b[i] > hi)
        clamp[i] = 1, changed = true;
    }
    if (!changed) break;
  }
  for (double& x : b) x = std::clamp(x, lo, hi);
  return b;
}

std::vector<int> allocate_bits(const std::vector<double>& w, double budget, double beta,
                               const std::vector<int>& allowed) {
  if (allowed.empty()) user_error("bit allocation: no allowed bit widths");
  const double lo = allowed.front(), hi = allowed.back();
  if (budget < lo || budget > hi) user_error("--budget {}: outside the method's bits {}..{}", budget, lo, hi);
  const std::vector<double> cont = water_fill(w, budget, beta, lo, hi);
  const size_t n = w.size();
  std::vector<size_t> k(n);  // index into allowed
  for (size_t i = 0; i < n; ++i) {
    size_t best = 0;
    for (size_t a = 1; a < allowed.size(); ++a)
      if (std::fabs(allowed[a] - cont[i]) < std::fabs(allowed[best] - cont[i])) best = a;
    k[i] = best;
  }
  const long target = std::lround(budget * double(n));
  auto total = [&] {
    long t = 0;
    for (size_t i = 0; i < n; ++i) t += allowed[k[i]];
    return t;
  };
  auto dist = [&](size_t i, size_t a) { return w[i] * std::pow(beta, -double(allowed[a])); };
  // Greedy: each step moves one layer one allowed width, by the largest gain per bit.
  for (int guard = 0; guard < 64 * int(n) && total() != target; ++guard) {
    const bool add = total() < target;
    long best = -1;
    double best_score = 0;
    for (size_t i = 0; i < n; ++i) {
      if (add ? k[i] + 1 >= allowed.size() : k[i] == 0) continue;
      const size_t to = add ? k[i] + 1 : k[i] - 1;
      const double dbits = std::fabs(double(allowed[to] - allowed[k[i]]));
      // adding: distortion removed per bit (largest first); removing: distortion added per bit (smallest first)
      const double score = (add ? dist(i, k[i]) - dist(i, to) : dist(i, to) - dist(i, k[i])) / dbits;
      if (best < 0 || (add ? score > best_score : score < best_score)) best = long(i), best_score = score;
    }
    if (best < 0) break;
    k[best] = add ? k[best] + 1 : k[best] - 1;
    if (add ? total() > target : total() < target) break;  // widths of > 1 bit may overshoot: stop nearest
  }
  std::vector<int> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = allowed[k[i]];
  return out;
}

}  // namespace qt::calib
