#include "calib/weighted_fit.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "formats/error.h"

namespace qt::calib {

double weighted_error(const SchemeGrid& grid, const float* v, const float* imp, int64_t n, const GroupParams& g) {
  double e = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double d = double(v[j]) - grid.value(grid.code(v[j], g), g);
    e += imp[j] * d * d;
  }
  return e;
}

namespace {

// Weighted least squares of the scale alone: value = t(q)·scale with t(q) = value(q, scale 1).
GroupParams refit_scale(const SchemeGrid& grid, const float* v, const float* imp, int64_t n, const GroupParams& g) {
  double num = 0, den = 0;
  const GroupParams unit{1.0f, 0.0f};
  for (int64_t j = 0; j < n; ++j) {
    const double t = grid.value(grid.code(v[j], g), unit);
    num += imp[j] * v[j] * t, den += imp[j] * t * t;
  }
  if (!(den > 0) || !(num > 0)) return g;
  return grid.stored({float(num / den), 0.0f});
}

}  // namespace

namespace {

// The search's inner loops on plain floats (the grid's per-value calls are too slow for 64
// candidates × every weight): codes by a multiply with the reciprocal, values without the
// dtype's rounding of the product. They only rank candidates; the winner is re-coded by the grid.
struct AffineTry {
  double err, sw, sl, sl2, sx, sxl;
};
// Round half to even by the 1.5·2²³ trick (exact for |x| < 2²², the default rounding mode):
// unlike std::rint it vectorizes on every x86-64 level. Callers clamp first.
inline float round_even(float x) { return (x + 12582912.0f) - 12582912.0f; }

AffineTry affine_try(const float* v, const float* imp, int64_t n, float s, float b, float nmax) {
  // fp32 sums over one group (≤ 128 values) so the loop vectorizes; they only rank candidates.
  float err = 0, sw = 0, sl = 0, sl2 = 0, sx = 0, sxl = 0;
  const float inv = 1.0f / s;
  for (int64_t j = 0; j < n; ++j) {
    const float l = round_even(std::min(std::max((v[j] - b) * inv, 0.0f), nmax));
    const float d = v[j] - (l * s + b);
    const float w = imp[j];
    err += w * d * d;
    sw += w, sl += w * l, sl2 += w * l * l, sx += w * v[j], sxl += w * v[j] * l;
  }
  return {err, sw, sl, sl2, sx, sxl};
}

GroupParams affine_ls(const SchemeGrid& grid, const AffineTry& t, const GroupParams& fallback) {
  const double D = t.sw * t.sl2 - t.sl * t.sl;
  if (!(D > 0)) return fallback;
  const double s = (t.sw * t.sxl - t.sx * t.sl) / D, b = (t.sl2 * t.sx - t.sl * t.sxl) / D;
  if (!(std::abs(s) > 0) || !std::isfinite(s) || !std::isfinite(b)) return fallback;
  return grid.stored({float(s), float(b)});
}

struct SymTry {
  double err, num, den;
};
// value = q·s, q = clamp(rint(x/s), qmin, qmax)
SymTry sym_try(const float* v, const float* imp, int64_t n, float s, float qmin, float qmax) {
  float err = 0, num = 0, den = 0;
  const float inv = 1.0f / s;
  for (int64_t j = 0; j < n; ++j) {
    const float q = round_even(std::min(std::max(v[j] * inv, qmin), qmax));
    const float d = v[j] - q * s;
    const float w = imp[j];
    err += w * d * d, num += w * v[j] * q, den += w * q * q;
  }
  return {err, num, den};
}

}  // namespace

GroupParams fit_weighted(const SchemeGrid& grid, const float* v, const float* imp, int64_t n) {
  GroupParams best = grid.stored(grid.fit_rtn(v, n));
  float lo = v[0], hi = v[0], amax = 0;
  for (int64_t j = 0; j < n; ++j)
    lo = std::min(lo, v[j]), hi = std::max(hi, v[j]), amax = std::max(amax, std::abs(v[j]));
  if (!(hi > lo) || amax == 0) return best;
  switch (grid.kind()) {
    case GridKind::Affine: {
      const float nmax = float(grid.qmax());
      double best_err = affine_try(v, imp, n, best.scale, best.bias, nmax).err;
      auto consider = [&](const GroupParams& g) {
        const AffineTry t = affine_try(v, imp, n, g.scale, g.bias, nmax);
        if (t.err < best_err) best_err = t.err, best = g;
        return t;
      };
      consider(affine_ls(grid, affine_try(v, imp, n, best.scale, best.bias, nmax), best));
      for (int is = -10; is <= 10; ++is) {  // llama.cpp make_qkx2_quants' grid of step counts
        const float steps = nmax + 0.1f * float(is);
        if (steps < 1) continue;
        const GroupParams g = grid.stored({(hi - lo) / steps, lo});
        consider(affine_ls(grid, consider(g), g));
      }
      for (int k = 0; k < 2; ++k) consider(affine_ls(grid, affine_try(v, imp, n, best.scale, best.bias, nmax), best));
      break;
    }
    case GridKind::Symmetric: {
      const float qmin = float(grid.qmin()), qmax = float(grid.qmax()), top = grid.top();
      double best_err = sym_try(v, imp, n, best.scale, qmin, qmax).err;
      auto consider = [&](const GroupParams& g) {
        const SymTry t = sym_try(v, imp, n, g.scale, qmin, qmax);
        if (t.err < best_err) best_err = t.err, best = g;
        return t;
      };
      auto refit = [&](const SymTry& t, const GroupParams& g) {
        return t.num > 0 && t.den > 0 ? grid.stored({float(t.num / t.den), 0.0f}) : g;
      };
      for (int k = 70; k <= 110; ++k) {
        const GroupParams g = grid.stored({amax * float(k) / 100.0f / top, 0.0f});
        consider(refit(consider(g), g));
      }
      break;
    }
    case GridKind::Table: {  // table lookups through the grid
      double best_err = weighted_error(grid, v, imp, n, best);
      auto consider = [&](const GroupParams& g) {
        const double e = weighted_error(grid, v, imp, n, g);
        if (e < best_err) best_err = e, best = g;
      };
      for (int k = 70; k <= 110; k += 2) {
        const GroupParams g = grid.stored({amax * float(k) / 100.0f, 0.0f});
        consider(g);
        consider(refit_scale(grid, v, imp, n, g));
      }
      break;
    }
  }
  return best;
}

PackedTensor quantize_weighted(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, const float* imp) {
  std::string why;
  if (!grid.fits(rows, cols, &why)) user_error("[{}, {}]: {}", rows, cols, why);
  const int64_t gl = grid.group_len(cols), ng = cols / gl;
  std::vector<GroupParams> params(size_t(rows * ng));
  std::vector<int16_t> codes(size_t(rows * cols));
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const float* v = w + r * cols + g * gl;
      const GroupParams p = fit_weighted(grid, v, imp + g * gl, gl);
      params[size_t(r * ng + g)] = p;
      for (int64_t j = 0; j < gl; ++j) codes[size_t(r * cols + g * gl + j)] = int16_t(grid.code(v[j], p));
    }
  return grid.pack(codes.data(), params.data(), rows, cols);
}

}  // namespace qt::calib
