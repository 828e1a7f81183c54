#include "calib/gptq.h"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <numeric>

#include "calib/weighted_fit.h"
#include "formats/error.h"

namespace qt::calib {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

PackedTensor gptq_quantize(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols,
                           std::vector<float> Hv, const GptqOptions& opt, double* loss) {
  std::string why;
  if (!grid.fits(rows, cols, &why)) user_error("[{}, {}]: {}", rows, cols, why);
  if (int64_t(Hv.size()) != cols * cols) user_error("gptq: Hessian of {} values for {} columns", Hv.size(), cols);
  const int64_t gl = grid.group_len(cols), ng = cols / gl;
  Eigen::Map<MatF> H(Hv.data(), cols, cols);
  MatF W = Eigen::Map<const MatF>(w, rows, cols);

  // Dead inputs: nothing reaches them, so their weights do not matter (AutoGPTQ zeroes them).
  for (int64_t j = 0; j < cols; ++j)
    if (H(j, j) == 0) H(j, j) = 1, W.col(j).setZero();
  std::vector<float> diag(cols);
  for (int64_t j = 0; j < cols; ++j) diag[j] = H(j, j);

  // Static groups (act-order) or the identity order's groups fitted from the original weights.
  std::vector<GroupParams> P(size_t(rows * ng));
  auto fit_group = [&](const MatF& M, int64_t r, int64_t g, const float* imp_perm_free) {
    const float* v = M.data() + r * cols + g * gl;
    P[size_t(r * ng + g)] = opt.weighted_groups ? fit_weighted(grid, v, imp_perm_free + g * gl, gl)
                                                : grid.stored(grid.fit_rtn(v, gl));
  };
  std::vector<int64_t> perm(cols);
  std::iota(perm.begin(), perm.end(), 0);
  if (opt.act_order) {
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < ng; ++g) fit_group(W, r, g, diag.data());
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return diag[a] > diag[b]; });
    MatF Wp(rows, cols), Hp(cols, cols);
    for (int64_t j = 0; j < cols; ++j) Wp.col(j) = W.col(perm[j]);
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < cols; ++j) Hp(i, j) = H(perm[i], perm[j]);
    W.swap(Wp);
    H = Hp;
  }
  const float damp = float(opt.damp * (std::accumulate(diag.begin(), diag.end(), 0.0) / double(cols)));
  for (int64_t j = 0; j < cols; ++j) H(j, j) += damp;

  // U: upper Cholesky factor of H⁻¹ (H⁻¹ = Uᵀ U), as AutoGPTQ's cholesky(cholesky_inverse(...), upper).
  MatF U;
  {
    Eigen::LLT<Eigen::MatrixXf> llt(H.cast<float>());
    if (llt.info() != Eigen::Success) user_error("gptq: the dampened Hessian is not positive definite");
    Eigen::MatrixXf Hinv = llt.solve(Eigen::MatrixXf::Identity(cols, cols));
    Eigen::LLT<Eigen::MatrixXf> llt2(Hinv);
    if (llt2.info() != Eigen::Success) user_error("gptq: the inverse Hessian is not positive definite");
    U = llt2.matrixU();
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
        if (!opt.act_order && col % gl == 0) {  // the group starts here: fit from the updated row
          const float* v = wr + col;
          P[size_t(r * ng + col / gl)] = opt.weighted_groups ? fit_weighted(grid, v, diag.data() + col, gl)
                                                             : grid.stored(grid.fit_rtn(v, gl));
        }
        const GroupParams& g = P[size_t(r * ng + col / gl)];
        const int q = grid.code(wr[i], g);
        const float d = U(i, i), err = (wr[i] - grid.value(q, g)) / d;
        codes[size_t(r * cols + col)] = int16_t(q);
        row_loss[size_t(r)] += double(err) * err / 2;
        for (int64_t j = i + 1; j < i2; ++j) wr[j] -= err * U(i, j);
        E(r, i - i1) = err;
      }
    }
    if (i2 < cols)
      W.rightCols(cols - i2).noalias() -= E.leftCols(n) * U.block(i1, i2, n, cols - i2);
  }
  if (loss) *loss = std::accumulate(row_loss.begin(), row_loss.end(), 0.0);
  return grid.pack(codes.data(), P.data(), rows, cols);
}

}  // namespace qt::calib
