#include "calib/gptq.h"

#include <Eigen/Core>
#include <algorithm>
#include <numeric>

#include "calib/weighted_fit.h"
#include "formats/error.h"
#include "libquant/linear/linear.h"

// LAPACK (OpenBLAS), the Fortran interface: trailing arguments are the character lengths.
extern "C" {
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, size_t uplo_len);
void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c, const int* ldc,
            size_t ta_len, size_t tb_len);
void strtri_(const char* uplo, const char* diag, const int* n, float* a, const int* lda, int* info, size_t uplo_len,
             size_t diag_len);
}

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
  const float damp =
      float(opt.damp * (std::accumulate(h.diag.begin(), h.diag.end(), 0.0) / double(std::max<int64_t>(cols, 1))));
  // U is the upper Cholesky factor of the inverse of the dampened, permuted H (Hp). With J the
  // order reversal and J·Hp·J = L·Lᵀ: Hp⁻¹ = (J L⁻ᵀ J)(J L⁻¹ J), so U = J L⁻¹ J — one Cholesky and
  // one triangular inverse (LAPACK spotrf + strtri, n³/3 flops each, threaded by OpenBLAS) in one
  // n×n buffer, where AutoGPTQ's cholesky, cholesky_inverse and second cholesky take 4× the work
  // (minutes at an 8B model's n = 14336 on two cores).
  // LAPACK is column-major: the row-major buffer M holding S = J·Hp·J is S itself (symmetric), its
  // "upper" factor R (S = RᵀR) is L = Rᵀ read row-major, and strtri's R⁻¹ read row-major is L⁻¹.
  const int64_t n = cols;
  if (opt.refine_sweeps > 0) {  // the refinement's objective: the same dampened H, column order
    h.H = Hv;
    for (int64_t j = 0; j < n; ++j) h.H[size_t(j * n + j)] += std::max(damp, 1e-10f);
  }
  if (opt.act_order) {  // a permuted copy
    h.U.assign(size_t(n * n), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) h.U[size_t(i * n + j)] = H(h.perm[n - 1 - i], h.perm[n - 1 - j]);
    std::vector<float>().swap(Hv);
  } else {  // J·H·J is H's storage reversed: in place, one n×n buffer in all (822 MB at n = 14336)
    h.U = std::move(Hv);
    std::reverse(h.U.begin(), h.U.end());
  }
  for (int64_t j = 0; j < n; ++j) h.U[size_t(j * n + j)] += std::max(damp, 1e-10f);
  const int ni = int(n);
  int info = 0;
  spotrf_("U", &ni, h.U.data(), &ni, &info, 1);
  if (info != 0) user_error("gptq: the dampened Hessian is not positive definite (LAPACK spotrf: {})", info);
  strtri_("U", "N", &ni, h.U.data(), &ni, &info, 1, 1);
  if (info != 0) user_error("gptq: the Hessian's Cholesky factor is singular (LAPACK strtri: {})", info);
  // U(i, j) = L⁻¹(n−1−i, n−1−j): in row-major storage, index i·n + j of U is index n² − 1 − (i·n + j)
  // of L⁻¹ — the same storage reversed end to end. Then U's lower triangle, which LAPACK did not
  // touch, is cleared.
  std::reverse(h.U.begin(), h.U.end());
  for (int64_t i = 1; i < n; ++i) std::fill_n(h.U.data() + i * n, i, 0.0f);
  return h;
}

PackedTensor gptq_quantize(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, std::vector<float> H,
                           const GptqOptions& opt, double* loss) {
  return gptq_quantize(grid, w, rows, cols, prepare_gptq_hessian(std::move(H), cols, opt), opt, loss);
}

double gptq_sweep(const float* w, int64_t rows, int64_t cols, int64_t gl, const GptqHessian& h, const GptqOptions& opt,
                  GptqRounder& rd) {
  if (h.cols != cols) user_error("gptq: Hessian for {} columns, weight has {}", h.cols, cols);
  const int64_t ng = cols / gl;
  const std::vector<int64_t>& perm = h.perm;
  const bool permuted = opt.act_order;
  Eigen::Map<const MatF> U(h.U.data(), cols, cols);

  // The working copy, columns in pass order; dead columns zeroed. Group parameters: static (fitted
  // from the original weights up front) under act-order, otherwise fitted when the pass reaches
  // each group.
  // Under act-order with refit_groups, a group is fitted instead when the pass first reaches one of
  // its columns (first[i]), from its gl columns as updated so far (pos_of: their positions).
  const bool refit = permuted && opt.refit_groups;
  std::vector<int64_t> pos_of(size_t(refit ? cols : 0));
  std::vector<char> first(size_t(refit ? cols : 0), 0);
  if (refit) {
    for (int64_t i = 0; i < cols; ++i) pos_of[size_t(perm[i])] = i;
    std::vector<char> seen(size_t(ng), 0);
    for (int64_t i = 0; i < cols; ++i)
      if (!seen[size_t(perm[i] / gl)]) seen[size_t(perm[i] / gl)] = first[size_t(i)] = 1;
  }
  MatF W(rows, cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = w + r * cols;
    if (permuted && !refit)
      for (int64_t g = 0; g < ng; ++g) rd.fit(r, g * gl, src + g * gl);
    for (int64_t i = 0; i < cols; ++i) W(r, i) = h.diag[perm[i]] == 0 ? 0.0f : src[perm[i]];
  }

  std::vector<double> row_loss(size_t(rows), 0.0);
  const int64_t bs = std::max(1, opt.block);
  MatF E(rows, bs);
  for (int64_t i1 = 0; i1 < cols; i1 += bs) {
    const int64_t i2 = std::min(cols, i1 + bs), n = i2 - i1;
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t r = 0; r < rows; ++r) {
      float* wr = W.data() + r * cols;
      std::vector<float> v(size_t(refit ? gl : 0));
      for (int64_t i = i1; i < i2; ++i) {
        const int64_t col = perm[i];
        // A group starts here (identity order): fit it from the row as updated so far.
        if (!permuted && col % gl == 0) rd.fit(r, col, wr + col);
        if (refit && first[size_t(i)]) {
          // The group's columns as updated so far: those past this batch still lack the batch's
          // lazy update from the columns before i, added here.
          const int64_t g0 = col / gl * gl;
          for (int64_t k = 0; k < gl; ++k) {
            const int64_t p = pos_of[size_t(g0 + k)];
            float x = wr[p];
            if (p >= i2)
              for (int64_t t = i1; t < i; ++t) x -= E(r, t - i1) * U(t, p);
            v[size_t(k)] = x;
          }
          rd.fit(r, g0, v.data());
        }
        const float d = U(i, i), err = (wr[i] - rd.round(r, col, wr[i])) / d;
        row_loss[size_t(r)] += double(err) * err / 2;
        const float* u = h.U.data() + i * cols;
        for (int64_t j = i + 1; j < i2; ++j) wr[j] -= err * u[j];
        E(r, i - i1) = err;
      }
    }
    if (i2 < cols) {
      // W[:, i2:] −= E · U[i1:i2, i2:] in place (sgemm with β = 1). Column-major, as BLAS sees the
      // row-major buffers: Wᵀ[i2:, :] (rest × rows, ld cols) −= U[i1:i2, i2:]ᵀ (rest × n, ld cols) · Eᵀ (n × rows, ld bs).
      const int m = int(cols - i2), nn = int(rows), k = int(n), ldu = int(cols), lde = int(bs);
      const float alpha = -1.0f, beta = 1.0f;
      sgemm_("N", "N", &m, &nn, &k, &alpha, h.U.data() + i1 * cols + i2, &ldu, E.data(), &lde, &beta, W.data() + i2,
             &ldu, 1, 1);
    }
  }
  return std::accumulate(row_loss.begin(), row_loss.end(), 0.0);
}

namespace {

// The scheme's groups: parameters by the RTN rule or the weighted search, codes the grid's nearest.
struct SchemeRounder : GptqRounder {
  const SchemeGrid& grid;
  const GptqHessian& h;
  bool weighted;
  int64_t cols, gl, ng;
  std::vector<GroupParams> P;
  std::vector<int16_t> codes;
  SchemeRounder(const SchemeGrid& g, const GptqHessian& hh, bool w, int64_t rows, int64_t c)
      : grid(g),
        h(hh),
        weighted(w),
        cols(c),
        gl(g.group_len(c)),
        ng(c / gl),
        P(size_t(rows * ng)),
        codes(size_t(rows * c)) {}
  void fit(int64_t r, int64_t col, const float* v) override {
    P[size_t(r * ng + col / gl)] =
        weighted ? fit_weighted(grid, v, h.diag.data() + col, gl) : grid.stored(grid.fit_rtn(v, gl));
  }
  float round(int64_t r, int64_t col, float x) override {
    const GroupParams& g = P[size_t(r * ng + col / gl)];
    const int q = grid.code(x, g);
    codes[size_t(r * cols + col)] = int16_t(q);
    return grid.value(q, g);
  }
};

}  // namespace

PackedTensor gptq_quantize(const SchemeGrid& unbound, const float* w, int64_t rows, int64_t cols, const GptqHessian& h,
                           const GptqOptions& opt, double* loss, RefineResult* refined) {
  const SchemeGrid grid = unbound.for_weight(w, rows, cols);  // the global scale of the weight before any update
  std::string why;
  if (!grid.fits(rows, cols, &why)) user_error("[{}, {}]: {}", rows, cols, why);
  SchemeRounder rd(grid, h, opt.weighted_groups, rows, cols);
  const double l = gptq_sweep(w, rows, cols, rd.gl, h, opt, rd);
  if (loss) *loss = l;
  if (opt.refine_sweeps > 0) {
    if (int64_t(h.H.size()) != cols * cols) user_error("gptq: the refinement needs the Hessian kept (refine_sweeps)");
    // Dead columns (H_jj = 0) were swept as zeros: the refinement starts from those weights too.
    std::vector<float> w0(w, w + rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        if (h.diag[size_t(j)] == 0) w0[size_t(r * cols + j)] = 0;
    const RefineResult rr = refine_codes_and_scales(grid, w0.data(), rows, cols, rd.gl, h.H.data(), rd.codes.data(),
                                                    rd.P.data(), opt.refine_sweeps);
    if (refined) *refined = rr;
  }
  return grid.pack(rd.codes.data(), rd.P.data(), rows, cols);
}

}  // namespace qt::calib
