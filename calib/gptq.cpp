#include "calib/gptq.h"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <numeric>

#include "calib/weighted_fit.h"
#include "formats/error.h"
#include "libquant/model/linear.h"

namespace qt::calib {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

GptqHessian prepare_gptq_hessian(std::vector<float> Hv, int64_t cols, const GptqOptions& opt) {
  if (int64_t(Hv.size()) != cols * cols) user_error("gptq: Hessian of {} values for {} columns", Hv.size(), cols);
  GptqHessian h;
  h.cols = cols;
  Eigen::Map<MatF> H(Hv.data(), cols, cols);
  h.diag.resize(size_t(cols));
  for (int64_t j = 0; j < cols; ++j) h.diag[j] = H(j, j);
  // Dead inputs: nothing reaches them (AutoGPTQ sets H_jj = 1 and zeroes the weights).
  for (int64_t j = 0; j < cols; ++j)
    if (H(j, j) == 0) H(j, j) = 1;
  h.perm.resize(size_t(cols));
  std::iota(h.perm.begin(), h.perm.end(), 0);
  if (opt.act_order)
    std::stable_sort(h.perm.begin(), h.perm.end(), [&](int64_t a, int64_t b) { return h.diag[a] > h.diag[b]; });
  Eigen::MatrixXf Hp(cols, cols);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j) Hp(i, j) = H(h.perm[i], h.perm[j]);
  const float damp =
      float(opt.damp * (std::accumulate(h.diag.begin(), h.diag.end(), 0.0) / double(std::max<int64_t>(cols, 1))));
  for (int64_t j = 0; j < cols; ++j) Hp(j, j) += std::max(damp, 1e-10f);
  Eigen::LLT<Eigen::MatrixXf> llt(Hp);
  if (llt.info() != Eigen::Success) user_error("gptq: the dampened Hessian is not positive definite");
  Eigen::MatrixXf Hinv = llt.solve(Eigen::MatrixXf::Identity(cols, cols));
  Eigen::LLT<Eigen::MatrixXf> llt2(Hinv);
  if (llt2.info() != Eigen::Success) user_error("gptq: the inverse Hessian is not positive definite");
  MatF U = llt2.matrixU();
  h.U.assign(U.data(), U.data() + U.size());
  return h;
}

PackedTensor gptq_quantize(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, std::vector<float> H,
                           const GptqOptions& opt, double* loss) {
  return gptq_quantize(grid, w, rows, cols, prepare_gptq_hessian(std::move(H), cols, opt), opt, loss);
}

PackedTensor gptq_quantize(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, const GptqHessian& h,
                           const GptqOptions& opt, double* loss) {
  std::string why;
  if (!grid.fits(rows, cols, &why)) user_error("[{}, {}]: {}", rows, cols, why);
  if (h.cols != cols) user_error("gptq: Hessian for {} columns, weight has {}", h.cols, cols);
  const int64_t gl = grid.group_len(cols), ng = cols / gl;
  const std::vector<int64_t>& perm = h.perm;
  const bool permuted = opt.act_order;
  Eigen::Map<const MatF> U(h.U.data(), cols, cols);

  // Group parameters: static (fitted from the original weights up front) under act-order,
  // otherwise fitted when the pass reaches each group.
  std::vector<GroupParams> P(size_t(rows * ng));
  auto fit = [&](const float* v, int64_t col) {
    return opt.weighted_groups ? fit_weighted(grid, v, h.diag.data() + col, gl) : grid.stored(grid.fit_rtn(v, gl));
  };
  // The working copy, columns in pass order; dead columns zeroed.
  MatF W(rows, cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = w + r * cols;
    if (permuted)
      for (int64_t g = 0; g < ng; ++g) P[size_t(r * ng + g)] = fit(src + g * gl, g * gl);
    for (int64_t i = 0; i < cols; ++i) W(r, i) = h.diag[perm[i]] == 0 ? 0.0f : src[perm[i]];
  }

  std::vector<int16_t> codes(size_t(rows * cols));
  std::vector<double> row_loss(size_t(rows), 0.0);
  const int64_t bs = std::max(1, opt.block);
  MatF E(rows, bs);
  for (int64_t i1 = 0; i1 < cols; i1 += bs) {
    const int64_t i2 = std::min(cols, i1 + bs), n = i2 - i1;
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t r = 0; r < rows; ++r) {
      float* wr = W.data() + r * cols;
      for (int64_t i = i1; i < i2; ++i) {
        const int64_t col = perm[i];
        // A group starts here (identity order): fit it from the row as updated so far.
        if (!permuted && col % gl == 0) P[size_t(r * ng + col / gl)] = fit(wr + col, col);
        const GroupParams& g = P[size_t(r * ng + col / gl)];
        const int q = grid.code(wr[i], g);
        const float d = U(i, i), err = (wr[i] - grid.value(q, g)) / d;
        codes[size_t(r * cols + col)] = int16_t(q);
        row_loss[size_t(r)] += double(err) * err / 2;
        const float* u = h.U.data() + i * cols;
        for (int64_t j = i + 1; j < i2; ++j) wr[j] -= err * u[j];
        E(r, i - i1) = err;
      }
    }
    if (i2 < cols) {
      // W[:, i2:] −= E · U[i1:i2, i2:] through the dense GEMM (y = x · Wᵀ with W = U-blockᵀ).
      const int64_t rest = cols - i2;
      MatF Ut = U.block(i1, i2, n, rest).transpose();
      MatF En = E.leftCols(n);
      MatF D(rows, rest);
      make_dense_linear(Ut.data(), rest, n, nullptr, Compute::F32)->forward(En.data(), rows, D.data());
      W.rightCols(rest) -= D;
    }
  }
  if (loss) *loss = std::accumulate(row_loss.begin(), row_loss.end(), 0.0);
  return grid.pack(codes.data(), P.data(), rows, cols);
}

}  // namespace qt::calib
