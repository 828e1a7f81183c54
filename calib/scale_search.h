// The searches behind `convert --awq` and `convert --smooth STATS --alpha auto` for one fold site
// (smoothquant.h's FoldSite): which per-channel scale s to fold, chosen on calibration activations.
//
// Scale search (AWQ's _search_module_scale, docs/spec/calibration.md §AWQ; llm-compressor's
// SmoothQuant α grid):
// for each candidate ratio α the caller's rule gives scales s (AWQ: mean|X|^α, floored at 1e-4,
// normalised by sqrt(max·min); SmoothQuant: max|X|^α / max|W|^(1−α)); every reader's W·diag(s) is
// fake-quantized with its scheme's RTN rule and divided back by s, the input is
// diag(s)⁻¹X — fake-quantized per token to int8 (absmax/127, the W8A8/W4A8 kernels' rule) when
// the scheme quantizes activations — times s, and the loss is the mean squared difference of the
// readers' outputs from the float ones, X·Wᵀ. s = 1 is tried first, then each α; the least loss
// wins (the earlier on a tie, so AWQ's α = 0, which is s = 1, reports as −1).
// AWQ's reference measures the whole attention / MLP module's output for q/k/v and gate/up; we
// measure the readers' own outputs, as it does for o_proj and down_proj.
//
// Clip search (AWQ's auto_clip_layer): per row and group of a weight already in the scaled basis,
// max_val = m·(1 − i/n_grid) for i < max_shrink·n_grid (m = the group's absmax), the group
// clamped to ±max_val and fake-quantized with the scheme's RTN rule; the error is
// Σ_t (x_t,g · (w_g − ŵ_g))² over every step-th calibration token (step = n/512, as the reference
// sub-samples), computed as dᵀ G d with the group's Gram matrix G = Σ_t x_t,gᵀ x_t,g (or through
// the tokens when a group is wider than the sample). The weight
// is clamped in place to the best max_val.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "libquant/schemes/grid.h"

namespace qt::calib {

struct SearchReader {
  const float* w = nullptr;  // [rows, cols], the original basis
  int64_t rows = 0;
  const SchemeGrid* grid = nullptr;  // nullptr: the reader stays float (no weight rounding)
  bool act_quant = false;            // its input is quantized per token, int8 or fp8 (needs a grid)
};

struct ScaleSearchResult {
  double alpha = -1;          // −1: s = 1 won
  double loss = 0;            // of the chosen scales
  double loss_unit = 0;       // of s = 1 (no smoothing)
  std::vector<float> scales;  // per column
};

// X [n, cols] the readers' float input; scales_for(α) the per-column scales of a candidate.
ScaleSearchResult search_scales(const float* X, int64_t n, int64_t cols, const std::vector<SearchReader>& readers,
                                const std::vector<double>& alphas,
                                const std::function<std::vector<float>(double)>& scales_for);

// AWQ's candidates: s_j = max(m_j^α, 1e-4) / sqrt(max·min) for the per-channel statistic m (mean |x_j|).
std::vector<float> awq_scales(const std::vector<float>& mean_abs, double alpha);

// w [rows, cols] fake-quantized row by row, group by group, with the grid's RTN rule into out.
void fake_quantize(const SchemeGrid& grid, const float* w, int64_t rows, int64_t cols, float* out);

// Clamps w [rows, cols] in place (AWQ's apply_clip); returns the chosen max_val per row and group.
std::vector<float> clip_search(const SchemeGrid& grid, float* w, int64_t rows, int64_t cols, const float* X, int64_t n,
                               int n_grid = 20, double max_shrink = 0.5, int64_t n_sample = 512);

}  // namespace qt::calib
