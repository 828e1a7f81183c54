#include "libquant/kv/lloyd_max.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "formats/error.h"

namespace qt::kv {
namespace {

// Cumulative tables of ∫f, ∫x·f and ∫x²·f over a uniform grid on [lo, hi].
struct Grid {
  double lo = 0, hi = 0, h = 0;
  std::vector<double> F, G, H;  // at grid points 0..N

  Grid(const std::function<double(double)>& f, double lo_, double hi_, int n) : lo(lo_), hi(hi_) {
    h = (hi - lo) / n;
    F.assign(n + 1, 0);
    G.assign(n + 1, 0);
    H.assign(n + 1, 0);
    double fp = f(lo), xp = lo;
    for (int i = 1; i <= n; ++i) {
      const double x = lo + i * h, fx = f(x);
      F[i] = F[i - 1] + 0.5 * h * (fp + fx);
      G[i] = G[i - 1] + 0.5 * h * (xp * fp + x * fx);
      H[i] = H[i - 1] + 0.5 * h * (xp * xp * fp + x * x * fx);
      fp = fx;
      xp = x;
    }
    const double total = F[n];  // normalize: the densities may be given up to a constant
    for (int i = 0; i <= n; ++i) {
      F[i] /= total;
      G[i] /= total;
      H[i] /= total;
    }
  }
  // Cumulative value of table T at x (linear between grid points, clamped to the support).
  double at(const std::vector<double>& T, double x) const {
    if (x <= lo) return 0;
    if (x >= hi) return T.back();
    const double u = (x - lo) / h;
    const size_t i = std::min(size_t(u), T.size() - 2);
    const double w = u - double(i);
    return T[i] + w * (T[i + 1] - T[i]);
  }
};

}  // namespace

Codebook lloyd_max(Density density, int levels, double param) {
  if (levels < 2) user_error("lloyd_max: need at least 2 levels, got {}", levels);
  std::function<double(double)> f;
  double lo = 0, hi = 0;
  switch (density) {
    case Density::Gaussian:
      f = [](double x) { return std::exp(-0.5 * x * x); };
      lo = -12, hi = 12;
      break;
    case Density::Laplacian: {  // unit variance: scale s = 1/√2
      const double s = 1.0 / std::sqrt(2.0);
      f = [s](double x) { return std::exp(-std::fabs(x) / s); };
      lo = -40 * s, hi = 40 * s;
      break;
    }
    case Density::Sphere: {
      const double d = param;
      if (d < 3) user_error("lloyd_max: sphere dimension must be at least 3, got {}", d);
      f = [d](double z) { return std::exp(0.5 * (d - 3) * std::log(std::max(0.0, 1 - z * z))); };
      lo = -1, hi = 1;
      break;
    }
    case Density::PolarAngle: {
      const int l = int(param);
      if (l < 2) user_error("lloyd_max: polar angle level must be at least 2, got {}", l);
      const double e = std::ldexp(1.0, l - 1) - 1;
      f = [e](double p) { return std::pow(std::max(0.0, std::sin(2 * p)), e); };
      lo = 0, hi = M_PI / 2;
      break;
    }
  }
  const Grid g(f, lo, hi, 1 << 20);

  // Start from the quantiles' cell centres.
  Codebook cb;
  std::vector<double>& c = cb.centroids;
  c.resize(levels);
  {
    size_t i = 0;
    for (int k = 0; k < levels; ++k) {
      const double target = (k + 0.5) / levels;
      while (i + 1 < g.F.size() && g.F[i + 1] < target) ++i;
      c[k] = lo + (i + 0.5) * g.h;
    }
  }
  std::vector<double>& t = cb.thresholds;
  t.resize(levels - 1);
  for (int it = 0; it < 200000; ++it) {
    for (int k = 0; k + 1 < levels; ++k) t[k] = 0.5 * (c[k] + c[k + 1]);
    double moved = 0;
    for (int k = 0; k < levels; ++k) {
      const double a = k == 0 ? lo : t[k - 1], b = k + 1 == levels ? hi : t[k];
      const double p = g.at(g.F, b) - g.at(g.F, a);
      if (p <= 0) continue;
      const double nc = (g.at(g.G, b) - g.at(g.G, a)) / p;
      moved = std::max(moved, std::fabs(nc - c[k]));
      c[k] = nc;
    }
    cb.iterations = it + 1;
    if (moved < 1e-12) break;
  }
  for (int k = 0; k + 1 < levels; ++k) t[k] = 0.5 * (c[k] + c[k + 1]);
  // MSE = E[x²] − Σ p_k c_k² (the centroid condition holds at the fixed point).
  double m = g.H.back();
  for (int k = 0; k < levels; ++k) {
    const double a = k == 0 ? lo : t[k - 1], b = k + 1 == levels ? hi : t[k];
    m -= (g.at(g.F, b) - g.at(g.F, a)) * c[k] * c[k];
  }
  cb.mse = m;
  return cb;
}

}  // namespace qt::kv
