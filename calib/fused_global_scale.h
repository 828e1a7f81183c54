// One global scale for the projections vLLM fuses into one weight (q|k|v as qkv_proj, gate|up as
// gate_up_proj, an expert's gate|up): vLLM's NVFP4 kernels take one global scale per fused weight,
// so llm-compressor gives every member the smallest of their own global scales
// (update_fused_layer_weight_global_scales, vllm-project/llm-compressor
// src/llmcompressor/modifiers/utils/helpers.py) — the member with the largest absmax keeps its
// scale, the others' E4M3 block scales sit lower in E4M3's range. As there, a group shares only
// when every member is planned with a tensor-level scale (nvfp4, nvfp4_a4).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "libquant/schemes/scheme.h"

namespace qt::calib {

// The input-channel importances of a weight (mean squares of its inputs, cols entries), or
// nullptr where none are known.
using ImportanceOf = std::function<const float*(const std::string& name, int64_t cols)>;

// Sets SchemeParams::global_scale of every member of each fused group in plan to the minimum of
// the members' own global scales (the scheme's tensor_scale of ck's weight as it is now: after
// any folded smoothing, before GPTQ). Other entries are left as they are.
// With importances (--imatrix without GPTQ), every block projection whose members all have them
// gets a searched global scale instead (search_global_scale over the group's members together,
// starting from that minimum), so that a fused group still shares one.
void share_fused_global_scales(const Checkpoint& ck, std::map<std::string, SchemeParams>& plan,
                               const ImportanceOf& importance = nullptr);

// One weight of a group that shares a global scale, with its input-channel importances.
struct ScaledWeight {
  const float* w;
  int64_t rows, cols;
  const float* imp;
};

// The global scale among gs0·2^(−k/16), k = 0…15, whose groups' weighted errors after
// fit_weighted (summed over every row_stride-th row of every member) are least; gs0 on ties.
// Scaling gs by a power of two moves every E4M3 block scale by the same power (away from
// E4M3's ends), so one octave below gs0 holds every placement of the E4M3 grid relative to the
// weights; below gs0 no block scale saturates at 448, so every block can map its max to 4.
float search_global_scale(const SchemeParams& p, float gs0, const std::vector<ScaledWeight>& ws, int row_stride);

}  // namespace qt::calib
