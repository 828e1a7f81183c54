#include "calib/lloyd_max_empirical.h"

#include <algorithm>
#include <cmath>

#include "formats/error.h"

namespace qt::calib {

kv::Codebook lloyd_max_empirical(std::vector<float> x, int levels) {
  if (x.empty() || levels < 2) user_error("Lloyd-Max: {} levels from {} samples", levels, x.size());
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  std::vector<double> pre(n + 1, 0.0), pre2(n + 1, 0.0);  // prefix sums of x and x²
  for (size_t i = 0; i < n; ++i) pre[i + 1] = pre[i] + x[i], pre2[i + 1] = pre2[i] + double(x[i]) * x[i];
  kv::Codebook cb = kv::lloyd_max(kv::Density::Gaussian, levels);
  std::vector<double>& c = cb.centroids;
  std::vector<double>& t = cb.thresholds;
  // samples ≤ t[i] belong to cell i (an exact tie goes to the lower cell, as codebook_index)
  auto cut = [&](double th) {
    return size_t(std::upper_bound(x.begin(), x.end(), th, [](double a, float b) { return a < double(b); }) -
                  x.begin());
  };
  cb.iterations = 0;
  for (int it = 0; it < 200; ++it) {
    for (int i = 0; i + 1 < levels; ++i) t[size_t(i)] = 0.5 * (c[size_t(i)] + c[size_t(i) + 1]);
    double moved = 0;
    size_t lo = 0;
    for (int i = 0; i < levels; ++i) {
      const size_t hi = i + 1 < levels ? cut(t[size_t(i)]) : n;
      if (hi > lo) {
        const double m = (pre[hi] - pre[lo]) / double(hi - lo);
        moved = std::max(moved, std::abs(m - c[size_t(i)]));
        c[size_t(i)] = m;
      }
      lo = hi;
    }
    ++cb.iterations;
    if (moved < 1e-7) break;
  }
  std::sort(c.begin(), c.end());
  for (int i = 0; i + 1 < levels; ++i) t[size_t(i)] = 0.5 * (c[size_t(i)] + c[size_t(i) + 1]);
  // mse: Σ over cells of Σ (x − c)² = Σx² − 2cΣx + n c²
  double se = 0;
  size_t lo = 0;
  for (int i = 0; i < levels; ++i) {
    const size_t hi = i + 1 < levels ? cut(t[size_t(i)]) : n;
    const double s1 = pre[hi] - pre[lo], s2 = pre2[hi] - pre2[lo];
    se += s2 - 2 * c[size_t(i)] * s1 + double(hi - lo) * c[size_t(i)] * c[size_t(i)];
    lo = hi;
  }
  cb.mse = std::max(0.0, se / double(n));
  return cb;
}

}  // namespace qt::calib
