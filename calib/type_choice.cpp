#include "calib/type_choice.h"

#include <algorithm>
#include <limits>

namespace qt::calib {

namespace {

TypeChoice total(const std::vector<std::vector<TypeCandidate>>& cands, std::vector<int> pick) {
  TypeChoice r;
  for (size_t i = 0; i < cands.size(); ++i) r.bytes += cands[i][size_t(pick[i])].bytes;
  for (size_t i = 0; i < cands.size(); ++i) r.loss += cands[i][size_t(pick[i])].loss;
  r.pick = std::move(pick);
  return r;
}

}  // namespace

TypeChoice choose_types(const std::vector<std::vector<TypeCandidate>>& cands, uint64_t budget) {
  const size_t n = cands.size();
  uint64_t least = 0;
  for (auto& c : cands) {
    uint64_t m = std::numeric_limits<uint64_t>::max();
    for (auto& k : c) m = std::min(m, k.bytes);
    least += m;
  }
  if (n == 0 || least > budget) return {};

  const uint64_t unit = std::max<uint64_t>(1, (budget + (1u << 17) - 1) >> 17);
  const size_t S = size_t(budget / unit) + 1;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> dp(S, 0.0), next(S);  // dp[s]: least loss of the tensors so far in ≤ s units
  std::vector<std::vector<uint8_t>> choice(n, std::vector<uint8_t>(S, 0xff));
  for (size_t i = 0; i < n; ++i) {
    std::fill(next.begin(), next.end(), inf);
    for (size_t k = 0; k < cands[i].size(); ++k) {
      const uint64_t w = (cands[i][k].bytes + unit - 1) / unit;
      if (w >= S) continue;
      const double l = cands[i][k].loss;
      for (size_t s = size_t(w); s < S; ++s) {
        const double v = dp[s - size_t(w)] + l;
        if (v < next[s]) next[s] = v, choice[i][s] = uint8_t(k);
      }
    }
    dp.swap(next);
  }
  std::vector<int> pick(n, 0);
  if (dp[S - 1] < inf) {
    size_t s = S - 1;
    for (size_t i = n; i-- > 0;) {
      const int k = choice[i][s];
      pick[i] = k;
      s -= size_t((cands[i][size_t(k)].bytes + unit - 1) / unit);
    }
  } else {  // the rounding left no room: start from the smallest candidates
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < cands[i].size(); ++k)
        if (cands[i][k].bytes < cands[i][size_t(pick[i])].bytes) pick[i] = int(k);
  }
  TypeChoice best = total(cands, pick);

  // Spend what the rounding left: the upgrade saving the most loss per byte that still fits.
  for (;;) {
    double gain = 0;
    size_t bi = 0, bk = 0;
    for (size_t i = 0; i < n; ++i) {
      const TypeCandidate& cur = cands[i][size_t(best.pick[i])];
      for (size_t k = 0; k < cands[i].size(); ++k) {
        const TypeCandidate& c = cands[i][k];
        if (c.loss >= cur.loss || best.bytes - cur.bytes + c.bytes > budget) continue;
        const double g =
            (cur.loss - c.loss) / double(std::max<uint64_t>(1, c.bytes > cur.bytes ? c.bytes - cur.bytes : 0));
        if (g > gain) gain = g, bi = i, bk = k;
      }
    }
    if (gain <= 0) break;
    best.pick[bi] = int(bk);
    best = total(cands, best.pick);
  }

  // Uniform plans: candidate k everywhere (where every tensor has a k-th candidate).
  size_t common = cands[0].size();
  for (auto& c : cands) common = std::min(common, c.size());
  for (size_t k = 0; k < common; ++k) {
    TypeChoice u = total(cands, std::vector<int>(n, int(k)));
    if (u.bytes <= budget && u.loss < best.loss) best = std::move(u);
  }
  return best;
}

}  // namespace qt::calib
