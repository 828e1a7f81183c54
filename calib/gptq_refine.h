// A refinement after GPTQ's column sweep (`convert --gptq --gptq-refine N`): coordinate descent on
// the layer's output error over calibration text, Σ_r (w_r − ŵ_r)ᵀ H (w_r − ŵ_r) with H = Σ xᵀx,
// whose variables are the stored codes and the stored group scales. GPTQ is greedy — each code is
// fixed once, against the columns not yet quantized — and fits a group's scale before knowing its
// codes; descent on the whole quadratic then moves whatever single code or scale still lowers it
// (QuantEase: Behdin et al. 2023, arXiv 2309.01885, cycles over the codes the same way).
//   code  step: for each column j, every code of the grid is scored exactly under the row's
//         current residual (Δ = −2·d·(He)_j + d²·H_jj for a value change d) and the best kept;
//   scale step: for each group, with its codes fixed, every stored scale of the row's list
//         (SchemeGrid::scale_candidates; nvfp4: the E4M3 codes that put the least-squares scale
//         (tᵀH_gg-weighted fit of the codes' values t to the residual) between 3 and 9 of the ±6
//         grid) is scored exactly by its change of the quadratic and the best kept.
// Each step keeps a change only when it lowers the error, so the refined error never exceeds
// GPTQ's; the codes and scales stay those of the scheme's layout (an ordinary file).
#pragma once
#include <cstdint>

#include "libquant/schemes/grid.h"

namespace qt::calib {

struct RefineResult {
  double before = 0, after = 0;  // the summed error Σ_r e_rᵀ H e_r before and after
  int64_t codes_changed = 0, scales_changed = 0;
};

// w [rows, cols] the weight GPTQ started from, H [cols, cols] symmetric (the objective's matrix),
// codes [rows, cols] and params [rows, cols / gl] (stored precision) of `grid` (the grid the
// weight was bound to: for_weight), updated in place. `sweeps` passes over all codes then all
// scales (the scale step only for grids that list their stored scales); scales_only: the scale
// step alone, the codes kept as given. Rows in parallel; a row stops early when a pass changes nothing.
RefineResult refine_codes_and_scales(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, int64_t gl,
                                     const float* H, int16_t* codes, GroupParams* params, int sweeps,
                                     bool scales_only = false);

// Σ_r (w_r − ŵ_r)ᵀ H (w_r − ŵ_r) for the values ŵ of codes and params under grid.
double output_error(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, int64_t gl, const float* H,
                    const int16_t* codes, const GroupParams* params);

}  // namespace qt::calib
