// Importance-weighted rounding (llama.cpp's imatrix idea, `convert --imatrix STATS`): each
// group's scale (and affine's offset) chosen to minimise Σ_j imp_j (w_j − deq(q_j))² instead of
// taking the RTN rule's min/max, where imp_j is the mean square of input channel j over
// calibration text (calib/act_stats.h) — the diagonal of the Hessian of the layer's output error.
// No sequential pass; the codes stay the scheme's nearest rounding under the chosen parameters,
// so the output is an ordinary file of the scheme.
//
// Search (per group, all candidates scored by the weighted error with stored-precision
// parameters; the RTN parameters are always a candidate, so the weighted error never exceeds
// RTN's):
//   affine: 21 grids spanning [min, max] with n_bins + δ steps, δ ∈ {−1, −0.9, …, +1} (llama.cpp
//     make_qkx2_quants), each followed by two weighted least-squares refits of (scale, bias)
//     given its codes;
//   int8/int4 (symmetric): scale = f·absmax/q_top, f ∈ {0.70, 0.71, …, 1.10}, each refit by
//     weighted least squares of the scale given its codes;
//   nf4/fp4: absmax·f, f ∈ {0.70, …, 1.10}, refit the same way (values table[q]·scale);
//   nvfp4: every E4M3 scale that puts the group's absmax between 3 and 9 of E2M1's ±6
//     (SchemeGrid::scale_candidates; libquant/schemes/nvfp4.cpp), each scored exactly.
#pragma once
#include <cstdint>

#include "libquant/schemes/grid.h"

namespace qt::calib {

// Weighted error Σ imp_j (v_j − value(code(v_j)))² under stored parameters g.
double weighted_error(const SchemeGrid& grid, const float* v, const float* imp, int64_t n, const GroupParams& g);

// The best parameters found for one group (stored precision).
GroupParams fit_weighted(const SchemeGrid& grid, const float* v, const float* imp, int64_t n);

// A [rows, cols] weight quantized group by group with fit_weighted; imp has cols entries (one per
// input channel). Rows in parallel.
PackedTensor quantize_weighted(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, const float* imp);

}  // namespace qt::calib
