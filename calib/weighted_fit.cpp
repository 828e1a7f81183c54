#include "calib/weighted_fit.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "calib/weighted_fit_lanes.h"
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

// The search scores its candidates on plain floats (the grid's per-value calls are too slow for
// 64 candidates × every weight), many at once (weighted_fit_lanes.h): codes by a multiply with
// the reciprocal, values without the dtype's rounding of the product. They only rank candidates;
// the winner is re-coded by the grid.
struct AffineTry {
  double err, sw, sl, sl2, sx, sxl;
};
AffineTry widen(const AffineSums& t) { return {t.err, t.sw, t.sl, t.sl2, t.sx, t.sxl}; }

AffineTry affine_try(const float* v, const float* imp, int64_t n, const GroupParams& g, float nmax) {
  AffineSums t;
  affine_sums(v, imp, n, &g.scale, &g.bias, 1, nmax, &t);
  return widen(t);
}

GroupParams affine_ls(const SchemeGrid& grid, const AffineTry& t, const GroupParams& fallback) {
  const double D = t.sw * t.sl2 - t.sl * t.sl;
  if (!(D > 0)) return fallback;
  const double s = (t.sw * t.sxl - t.sx * t.sl) / D, b = (t.sl2 * t.sx - t.sl * t.sxl) / D;
  if (!(std::abs(s) > 0) || !std::isfinite(s) || !std::isfinite(b)) return fallback;
  return grid.stored({float(s), float(b)});
}

// Sums of candidates `g` (scored together) as affine_try would give them one by one.
std::vector<AffineTry> affine_tries(const float* v, const float* imp, int64_t n, const std::vector<GroupParams>& g,
                                    float nmax) {
  std::vector<float> s(g.size()), b(g.size());
  for (size_t i = 0; i < g.size(); ++i) s[i] = g[i].scale, b[i] = g[i].bias;
  std::vector<AffineSums> t(g.size());
  affine_sums(v, imp, n, s.data(), b.data(), int(g.size()), nmax, t.data());
  std::vector<AffineTry> out;
  for (const AffineSums& x : t) out.push_back(widen(x));
  return out;
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
      // Candidates in llama.cpp make_qkx2_quants' order: the RTN parameters' least-squares refit,
      // then each of 21 grids of step counts and its refit; then two refits of the best. Each
      // stage's candidates are scored together; the comparisons run in that order.
      std::vector<GroupParams> first{best};
      for (int is = -10; is <= 10; ++is) {
        const float steps = nmax + 0.1f * float(is);
        if (steps >= 1) first.push_back(grid.stored({(hi - lo) / steps, lo}));
      }
      const std::vector<AffineTry> a = affine_tries(v, imp, n, first, nmax);
      std::vector<GroupParams> refits;
      for (size_t i = 0; i < first.size(); ++i) refits.push_back(affine_ls(grid, a[i], first[i]));
      const std::vector<AffineTry> r = affine_tries(v, imp, n, refits, nmax);
      double best_err = a[0].err;
      auto take = [&](const GroupParams& g, const AffineTry& t) {
        if (t.err < best_err) best_err = t.err, best = g;
      };
      take(refits[0], r[0]);
      for (size_t i = 1; i < first.size(); ++i) take(first[i], a[i]), take(refits[i], r[i]);
      for (int k = 0; k < 2; ++k) {
        const GroupParams g = affine_ls(grid, affine_try(v, imp, n, best, nmax), best);
        take(g, affine_try(v, imp, n, g, nmax));
      }
      break;
    }
    case GridKind::Symmetric: {
      const float qmin = float(grid.qmin()), qmax = float(grid.qmax()), top = grid.top();
      // The RTN parameters, then scale = f·absmax/top for f = 0.70 … 1.10, each followed by the
      // weighted least-squares refit of its scale; scored together, compared in that order.
      std::vector<GroupParams> first{best};
      for (int k = 70; k <= 110; ++k) first.push_back(grid.stored({amax * float(k) / 100.0f / top, 0.0f}));
      auto tries = [&](const std::vector<GroupParams>& g) {
        std::vector<float> s(g.size());
        for (size_t i = 0; i < g.size(); ++i) s[i] = g[i].scale;
        std::vector<SymSums> t(g.size());
        sym_sums(v, imp, n, s.data(), int(g.size()), qmin, qmax, t.data());
        return t;
      };
      const std::vector<SymSums> a = tries(first);
      std::vector<GroupParams> refits;
      for (size_t i = 0; i < first.size(); ++i) {
        const double num = a[i].num, den = a[i].den;
        refits.push_back(num > 0 && den > 0 ? grid.stored({float(num / den), 0.0f}) : first[i]);
      }
      const std::vector<SymSums> r = tries(refits);
      double best_err = a[0].err;
      for (size_t i = 1; i < first.size(); ++i) {
        if (double(a[i].err) < best_err) best_err = a[i].err, best = first[i];
        if (double(r[i].err) < best_err) best_err = r[i].err, best = refits[i];
      }
      break;
    }
    case GridKind::Table:    // table lookups through the grid
    case GridKind::Float: {  // minifloat codes through the grid (the RTN scale is absmax / top)
      const float top = grid.kind() == GridKind::Float ? grid.top() : 1.0f;
      double best_err = weighted_error(grid, v, imp, n, best);
      auto consider = [&](const GroupParams& g) {
        const double e = weighted_error(grid, v, imp, n, g);
        if (e < best_err) best_err = e, best = g;
      };
      // A row whose stored scales can be listed (nvfp4's E4M3 codes): each one, no refit (a
      // refit scale would round back to one of them).
      GroupParams listed[64];
      if (const int nc = grid.scale_candidates(amax, listed, 64); nc > 0) {
        for (int i = 0; i < nc; ++i) consider(listed[i]);
        break;
      }
      for (int k = 70; k <= 110; k += 2) {
        const GroupParams g = grid.stored({amax * float(k) / 100.0f / top, 0.0f});
        consider(g);
        consider(refit_scale(grid, v, imp, n, g));
      }
      break;
    }
  }
  return best;
}

PackedTensor quantize_weighted(const SchemeGrid& unbound, const float* w, int64_t rows, int64_t cols,
                               const float* imp) {
  const SchemeGrid grid = unbound.for_weight(w, rows, cols);
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
