#pragma GCC optimize("fp-contract=off")  // each lane computes exactly the scalar loop's roundings
#include "calib/weighted_fit_lanes.h"

#include <algorithm>

namespace qt::calib {

namespace {

constexpr int kLanes = 16;
typedef float Lanes __attribute__((vector_size(4 * kLanes)));

// Round half to even by the 1.5·2²³ trick (exact for |x| < 2²², the default rounding mode).
#define QT_ROUND_EVEN(x) (((x) + 12582912.0f) - 12582912.0f)
// std::max(x, lo) and std::min(x, hi) as the scalar loop evaluates them.
#define QT_MAX(x, lo) ((x) < (lo) ? (lo) : (x))
#define QT_MIN(x, hi) ((hi) < (x) ? (hi) : (x))

}  // namespace

// (Macros, not helper functions: a helper returning a 64-byte vector would be a separate
// baseline-ABI function, not code of each target clone.)
__attribute__((target_clones("avx512f", "avx2", "default"))) void affine_sums(const float* v, const float* imp,
                                                                              int64_t n, const float* s, const float* b,
                                                                              int count, float nmax, AffineSums* out) {
  for (int c0 = 0; c0 < count; c0 += kLanes) {
    const int m = std::min(kLanes, count - c0);
    Lanes sv, bv;
    for (int i = 0; i < kLanes; ++i) sv[i] = i < m ? s[c0 + i] : 1.0f, bv[i] = i < m ? b[c0 + i] : 0.0f;
    const Lanes inv = 1.0f / sv, zero = {}, top = zero + nmax;
    Lanes err = zero, sw = zero, sl = zero, sl2 = zero, sx = zero, sxl = zero;
    for (int64_t j = 0; j < n; ++j) {
      const float x = v[j], w = imp[j];
      const Lanes u = (x - bv) * inv, c = QT_MAX(u, zero), l = QT_ROUND_EVEN(QT_MIN(c, top));
      const Lanes d = x - (l * sv + bv);
      err += w * d * d;
      sw += w, sl += w * l, sl2 += w * l * l, sx += w * x, sxl += w * x * l;
    }
    for (int i = 0; i < m; ++i) out[c0 + i] = {err[i], sw[i], sl[i], sl2[i], sx[i], sxl[i]};
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void sym_sums(const float* v, const float* imp, int64_t n,
                                                                           const float* s, int count, float qmin,
                                                                           float qmax, SymSums* out) {
  for (int c0 = 0; c0 < count; c0 += kLanes) {
    const int m = std::min(kLanes, count - c0);
    Lanes sv;
    for (int i = 0; i < kLanes; ++i) sv[i] = i < m ? s[c0 + i] : 1.0f;
    const Lanes inv = 1.0f / sv, zero = {}, lo = zero + qmin, hi = zero + qmax;
    Lanes err = zero, num = zero, den = zero;
    for (int64_t j = 0; j < n; ++j) {
      const float x = v[j], w = imp[j];
      const Lanes u = x * inv, c = QT_MAX(u, lo), q = QT_ROUND_EVEN(QT_MIN(c, hi));
      const Lanes d = x - q * sv;
      err += w * d * d, num += w * x * q, den += w * q * q;
    }
    for (int i = 0; i < m; ++i) out[c0 + i] = {err[i], num[i], den[i]};
  }
}

}  // namespace qt::calib
