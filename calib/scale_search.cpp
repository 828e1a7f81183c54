#include "calib/scale_search.h"

#include <algorithm>
#include <cmath>

#include <Eigen/Dense>

#include "libquant/linear/linear.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/scheme.h"

namespace qt::calib {

void fake_quantize(const SchemeGrid& unbound, const float* w, int64_t rows, int64_t cols, float* out) {
  const SchemeGrid grid = unbound.for_weight(w, rows, cols);
  const int64_t gl = grid.group_len(cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g0 = 0; g0 < cols; g0 += gl) {
      const float* v = w + r * cols + g0;
      const GroupParams p = grid.stored(grid.fit_rtn(v, gl));
      for (int64_t j = 0; j < gl; ++j) out[r * cols + g0 + j] = grid.value(grid.code(v[j], p), p);
    }
}

std::vector<float> awq_scales(const std::vector<float>& m, double alpha) {
  std::vector<float> s(m.size());
  float hi = 0, lo = INFINITY;
  for (size_t j = 0; j < m.size(); ++j) {
    s[j] = std::max(float(std::pow(double(m[j]), alpha)), 1e-4f);
    hi = std::max(hi, s[j]), lo = std::min(lo, s[j]);
  }
  const float norm = std::sqrt(hi * lo);
  for (float& v : s) v /= norm;
  return s;
}

namespace {

// y [n, rows] = x [n, cols] · wᵀ through the dense fp32 GEMM.
void matmul(const float* x, int64_t n, const float* w, int64_t rows, int64_t cols, float* y) {
  make_dense_linear(w, rows, cols, nullptr, Compute::F32)->forward(x, n, y);
}

}  // namespace

ScaleSearchResult search_scales(const float* X, int64_t n, int64_t cols, const std::vector<SearchReader>& readers,
                                const std::vector<double>& alphas,
                                const std::function<std::vector<float>(double)>& scales_for) {
  std::vector<std::vector<float>> ref(readers.size());
  int64_t out_elems = 0;
  for (size_t i = 0; i < readers.size(); ++i) {
    ref[i].resize(size_t(n * readers[i].rows));
    matmul(X, n, readers[i].w, readers[i].rows, cols, ref[i].data());
    out_elems += n * readers[i].rows;
  }
  std::vector<float> xs(size_t(n * cols)), ws, wq, y;
  // The loss of per-column scales s: Σ over readers ‖Q(X/s)·s · (Q(W·s)/s)ᵀ − X·Wᵀ‖² / outputs.
  // A reader with quantized activations (W8A8 / W4A8 int8, FP8 E4M3, per token) computes
  // Q(X/s)·Q(W·s)ᵀ: the s cancel, so its output is the scheme's own packed Linear on X/s (the
  // forward the evaluation runs) rather than a float product of fake-quantized operands.
  auto loss_of = [&](const std::vector<float>& s) {
    bool scaled_x = false;
    double sum = 0;
    for (size_t i = 0; i < readers.size(); ++i) {
      const SearchReader& rd = readers[i];
      y.resize(size_t(n * rd.rows));
      if (rd.act_quant && rd.grid) {
        if (!scaled_x) {
          for (int64_t t = 0; t < n; ++t)
            for (int64_t j = 0; j < cols; ++j) xs[t * cols + j] = X[t * cols + j] / s[j];
          scaled_x = true;
        }
        ws.resize(size_t(rd.rows * cols));
        for (int64_t r = 0; r < rd.rows; ++r)
          for (int64_t j = 0; j < cols; ++j) ws[r * cols + j] = rd.w[r * cols + j] * s[j];
        make_packed_linear(quantize_weights(ws.data(), rd.rows, cols, rd.grid->params()), nullptr)
            ->forward(xs.data(), n, y.data());
      } else {
        const float* w = rd.w;
        if (rd.grid) {
          ws.resize(size_t(rd.rows * cols)), wq.resize(ws.size());
          for (int64_t r = 0; r < rd.rows; ++r)
            for (int64_t j = 0; j < cols; ++j) ws[r * cols + j] = rd.w[r * cols + j] * s[j];
          fake_quantize(*rd.grid, ws.data(), rd.rows, cols, wq.data());
          for (int64_t r = 0; r < rd.rows; ++r)
            for (int64_t j = 0; j < cols; ++j) wq[r * cols + j] /= s[j];
          w = wq.data();
        }
        matmul(X, n, w, rd.rows, cols, y.data());
      }
      double part = 0;
#pragma omp parallel for reduction(+ : part) schedule(static)
      for (int64_t k = 0; k < n * rd.rows; ++k) {
        const double d = double(y[k]) - ref[i][k];
        part += d * d;
      }
      sum += part;
    }
    return sum / double(out_elems);
  };
  // s = 1 (leave the site alone) is the first candidate: SmoothQuant's rule has no α giving it.
  ScaleSearchResult best;
  best.alpha = -1;
  best.scales.assign(size_t(cols), 1.0f);
  best.loss = best.loss_unit = loss_of(best.scales);
  for (double a : alphas) {
    std::vector<float> s = scales_for(a);
    const double l = loss_of(s);
    if (l < best.loss) best.loss = l, best.alpha = a, best.scales = std::move(s);
  }
  return best;
}

std::vector<float> clip_search(const SchemeGrid& unbound, float* w, int64_t rows, int64_t cols, const float* X,
                               int64_t n, int n_grid, double max_shrink, int64_t n_sample) {
  const SchemeGrid grid = unbound.for_weight(w, rows, cols);  // the unclipped weight's global scale
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t gl = grid.group_len(cols), ng = cols / gl;
  // The reference's sub-sample: every step-th token, step = n / n_sample.
  const int64_t step = std::max<int64_t>(1, n / n_sample), ns = (n + step - 1) / step;
  Mat xs(ns, cols);
  for (int64_t t = 0; t < ns; ++t)
    for (int64_t j = 0; j < cols; ++j) xs(t, j) = X[t * step * cols + j];
  // ‖X_g d‖² as dᵀ G d costs gl² per candidate, through the tokens ns·gl: the smaller one.
  const bool use_gram = gl <= ns;
  std::vector<Mat> gram(static_cast<size_t>(use_gram ? ng : 0));
  for (int64_t g = 0; g < int64_t(gram.size()); ++g)
    gram[g] = xs.middleCols(g * gl, gl).transpose() * xs.middleCols(g * gl, gl);
  const int n_cand = int(max_shrink * n_grid);
  std::vector<float> best_max(size_t(rows * ng));
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t r = 0; r < rows; ++r) {
    Eigen::VectorXf d(gl);
    std::vector<float> c(static_cast<size_t>(gl));
    for (int64_t g = 0; g < ng; ++g) {
      float* v = w + r * cols + g * gl;
      float m = 0;
      for (int64_t j = 0; j < gl; ++j) m = std::max(m, std::abs(v[j]));
      float best = m;
      double best_err = INFINITY;
      for (int i = 0; i < n_cand; ++i) {
        const float mv = m * (1.0f - float(i) / float(n_grid));
        for (int64_t j = 0; j < gl; ++j) c[j] = std::clamp(v[j], -mv, mv);
        const GroupParams p = grid.stored(grid.fit_rtn(c.data(), gl));
        for (int64_t j = 0; j < gl; ++j) d[j] = v[j] - grid.value(grid.code(c[j], p), p);
        const double err =
            use_gram ? double(d.dot(gram[g] * d)) : double((xs.middleCols(g * gl, gl) * d).squaredNorm());
        if (err < best_err) best_err = err, best = mv;
      }
      for (int64_t j = 0; j < gl; ++j) v[j] = std::clamp(v[j], -best, best);
      best_max[r * ng + g] = best;
    }
  }
  return best_max;
}

}  // namespace qt::calib
