// GPTQ (arXiv 2210.17323; docs/spec/calibration.md §GPTQ) on one weight, as AutoGPTQ's /
// llm-compressor's `fasterquant`: columns quantized left to right, each one's rounding error spread
// over the columns not yet quantized through the inverse Hessian's upper Cholesky factor, in blocks
// of `block` columns (lazy batch updates). Dampening `damp`·mean(diag H) on the diagonal; dead
// inputs (H_jj = 0) get weight 0. Group parameters are fitted when the pass reaches a group's first
// column, from the weights as updated so far (`--act-order` instead fits every group once from the
// original weights — AutoGPTQ's static_groups — since the permuted pass would visit a group's
// columns out of order and MLX / compressed-tensors groups are contiguous columns). Codes are the
// scheme's nearest rounding under the group's stored parameters (grid.h), so the result is an
// ordinary file of the scheme.
#pragma once
#include <cstdint>
#include <vector>

#include "calib/gptq_refine.h"
#include "libquant/schemes/grid.h"

namespace qt::calib {

struct GptqOptions {
  double damp = 0.01;
  int block = 128;
  bool act_order = false;
  // Under act_order: fit each group when the pass first reaches one of its columns, from the
  // group's weights as updated so far, instead of from the original weights up front.
  bool refit_groups = false;
  // Fit group parameters with the importance-weighted search (weighted_fit.h, imp = diag H)
  // instead of the scheme's RTN rule.
  bool weighted_groups = false;
  // After the sweep: this many passes of coordinate descent on the output error over the codes
  // and group scales (gptq_refine.h), under the dampened H; 0 = none.
  int refine_sweeps = 0;
};

// What GPTQ needs of a Hessian, computed once for all the projections that share an input
// (q/k/v, gate/up): the column order, the dead columns, the diagonal, and U, the upper Cholesky
// factor of the dampened H's inverse (H⁻¹ = Uᵀ U, AutoGPTQ's cholesky(cholesky_inverse(·), upper)).
struct GptqHessian {
  int64_t cols = 0;
  std::vector<int64_t> perm;  // position -> column
  std::vector<float> diag;    // H_jj before dampening, by column
  std::vector<float> U;       // [cols, cols] row-major, in the permuted order
  std::vector<float> H;       // the dampened H, column order (kept only for refine_sweeps > 0)
};
// H [cols, cols] = Σ_t x_tᵀ x_t over the layer's inputs (any positive multiple; symmetric).
GptqHessian prepare_gptq_hessian(std::vector<float> H, int64_t cols, const GptqOptions& opt);

// The column sweep itself, for any grid: `fit(r, col, v)` is called when the pass reaches column
// col, the first of one of row r's groups of `gl` columns, with v the row's gl values from col as
// updated so far (under act-order: for every group up front, from the original weights); `round(r,
// col, x)` gives the value column col of row r is stored as. Rows are independent: both are
// called from several threads at once, never for the same row. Returns AutoGPTQ's loss (below).
// Precondition: gl divides cols, and gl divides the batch (opt.block) or the batch divides gl.
struct GptqRounder {
  virtual ~GptqRounder() = default;
  virtual void fit(int64_t r, int64_t col, const float* v) = 0;
  virtual float round(int64_t r, int64_t col, float x) = 0;
};
double gptq_sweep(const float* w, int64_t rows, int64_t cols, int64_t gl, const GptqHessian& h, const GptqOptions& opt,
                  GptqRounder& rounder);

// w [rows, cols] row-major (HF layout). `loss`, when given, receives Σ (w − q)² / [H⁻¹]_jj / 2,
// AutoGPTQ's reported error; `refined`, with opt.refine_sweeps, the refinement's errors.
PackedTensor gptq_quantize(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, const GptqHessian& h,
                           const GptqOptions& opt, double* loss = nullptr, RefineResult* refined = nullptr);
// Both steps.
PackedTensor gptq_quantize(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, std::vector<float> H,
                           const GptqOptions& opt, double* loss = nullptr);

}  // namespace qt::calib
