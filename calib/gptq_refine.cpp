#include "calib/gptq_refine.h"

#include <Eigen/Core>
#include <cmath>
#include <vector>

namespace qt::calib {

namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The residuals E = W − Ŵ [rows, cols] of the current codes and params.
MatF residuals(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, int64_t gl, const int16_t* codes,
               const GroupParams* params) {
  const int64_t ng = cols / gl;
  MatF E(rows, cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j)
      E(r, j) = w[r * cols + j] - grid.value(codes[r * cols + j], params[r * ng + j / gl]);
  return E;
}

// One row's state: ŵ, e = w − ŵ and g = H e (double: the incremental updates of g add up over a
// sweep), and f = eᵀ H e.
struct RowState {
  std::vector<double> g;
  std::vector<float> what, e;
  double f = 0;
};

}  // namespace

double output_error(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, int64_t gl, const float* H,
                    const int16_t* codes, const GroupParams* params) {
  const MatF E = residuals(grid, w, rows, cols, gl, codes, params);
  const MatF G = E * Eigen::Map<const MatF>(H, cols, cols);
  return double(E.cwiseProduct(G).cast<double>().sum());
}

RefineResult refine_codes_and_scales(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, int64_t gl,
                                     const float* H, int16_t* codes, GroupParams* params, int sweeps,
                                     bool scales_only) {
  const int64_t ng = cols / gl;
  const MatF E = residuals(grid, w, rows, cols, gl, codes, params);
  const MatF G = E * Eigen::Map<const MatF>(H, cols, cols);  // one GEMM for every row's H e
  // Whether the row lists its stored scales (nvfp4's E4M3 codes): the scale step needs the list.
  GroupParams probe[64];
  const bool scale_step = grid.scale_candidates(1.0f, probe, 64) > 0;
  std::vector<double> before(static_cast<size_t>(rows)), after(static_cast<size_t>(rows));
  std::vector<int64_t> n_codes(static_cast<size_t>(rows)), n_scales(static_cast<size_t>(rows));
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t r = 0; r < rows; ++r) {
    int16_t* q = codes + r * cols;
    GroupParams* P = params + r * ng;
    RowState s;
    s.g.resize(size_t(cols));
    s.what.resize(size_t(cols));
    s.e.resize(size_t(cols));
    for (int64_t j = 0; j < cols; ++j) {
      s.e[j] = E(r, j), s.what[j] = w[r * cols + j] - s.e[j], s.g[j] = G(r, j);
      s.f += double(s.e[j]) * s.g[j];
    }
    before[size_t(r)] = s.f;
    // e −= d on column j: g −= d·H[j, :] (H symmetric), f += −2 d g_j + d² H_jj.
    auto apply = [&](int64_t j, double d) {
      const float* h = H + j * cols;
      s.f += -2 * d * s.g[j] + d * d * h[j];
      s.e[j] = float(s.e[j] - d), s.what[j] = float(s.what[j] + d);
      for (int64_t k = 0; k < cols; ++k) s.g[k] -= d * h[k];
    };
    // A change counts only when it lowers f by more than rounding noise.
    auto tol = [&] { return 1e-9 * std::fabs(s.f) + 1e-30; };
    for (int sweep = 0; sweep < sweeps; ++sweep) {
      int64_t changed = 0;
      if (!scales_only)
        for (int64_t j = 0; j < cols; ++j) {
          const double hjj = H[j * cols + j];
          if (!(hjj > 0)) continue;
          const GroupParams& gp = P[j / gl];
          int best = q[j];
          double best_delta = -tol(), best_d = 0;
          for (int c = grid.qmin(); c <= grid.qmax(); ++c) {
            const double d = double(grid.value(c, gp)) - s.what[j];
            const double delta = -2 * d * s.g[j] + d * d * hjj;
            if (delta < best_delta) best_delta = delta, best = c, best_d = d;
          }
          if (best != q[j]) q[j] = int16_t(best), apply(j, best_d), ++changed;
        }
      n_codes[size_t(r)] += changed;
      if (!scale_step) continue;
      for (int64_t gi = 0; gi < ng; ++gi) {
        const int64_t c0 = gi * gl;
        // The least-squares scale for the group's codes: ŵ_G = σ·t moves f by −2δ tᵀg_G + δ² tᵀH_GG t.
        double tg = 0, tht = 0, s_cur = P[gi].scale;
        std::vector<double> t(static_cast<size_t>(gl));
        for (int64_t k = 0; k < gl; ++k) t[k] = grid.value(q[c0 + k], GroupParams{1.0f, 0.0f});
        for (int64_t a = 0; a < gl; ++a) {
          tg += t[a] * s.g[c0 + a];
          for (int64_t b = 0; b < gl; ++b) tht += t[a] * t[b] * H[(c0 + a) * cols + c0 + b];
        }
        if (!(tht > 0)) continue;
        const double s_ls = s_cur + tg / tht;
        if (!(s_ls > 0)) continue;
        // Every stored scale within [s_ls/2, 1.5·s_ls] (the list puts 4.5·s_ls between 3 and 9).
        GroupParams cand[64];
        const int nc = grid.scale_candidates(float(4.5 * s_ls), cand, 64);
        int best = -1;
        double best_delta = -tol();
        std::vector<double> d(static_cast<size_t>(gl)), best_d(static_cast<size_t>(gl));
        for (int ci = 0; ci < nc; ++ci) {
          if (cand[ci].scale == P[gi].scale) continue;
          for (int64_t k = 0; k < gl; ++k) d[k] = double(grid.value(q[c0 + k], cand[ci])) - s.what[c0 + k];
          double delta = 0;
          for (int64_t a = 0; a < gl; ++a) {
            double hd = 0;
            for (int64_t b = 0; b < gl; ++b) hd += H[(c0 + a) * cols + c0 + b] * d[b];
            delta += d[a] * (hd - 2 * s.g[c0 + a]);
          }
          if (delta < best_delta) best_delta = delta, best = ci, best_d = d;
        }
        if (best < 0) continue;
        P[gi] = cand[best];
        for (int64_t k = 0; k < gl; ++k)
          if (best_d[k] != 0) apply(c0 + k, best_d[k]);
        ++n_scales[size_t(r)], ++changed;
      }
      if (changed == 0) break;
    }
    after[size_t(r)] = s.f;
  }
  RefineResult res;
  for (int64_t r = 0; r < rows; ++r) {
    res.before += before[size_t(r)], res.after += after[size_t(r)];
    res.codes_changed += n_codes[size_t(r)], res.scales_changed += n_scales[size_t(r)];
  }
  return res;
}

}  // namespace qt::calib
