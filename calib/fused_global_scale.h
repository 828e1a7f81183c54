// One global scale for the projections vLLM fuses into one weight (q|k|v as qkv_proj, gate|up as
// gate_up_proj, an expert's gate|up): vLLM's NVFP4 kernels take one global scale per fused weight,
// so llm-compressor gives every member the smallest of their own global scales
// (update_fused_layer_weight_global_scales, vllm-project/llm-compressor
// src/llmcompressor/modifiers/utils/helpers.py) — the member with the largest absmax keeps its
// scale, the others' E4M3 block scales sit lower in E4M3's range. As there, a group shares only
// when every member is planned with a tensor-level scale (nvfp4, nvfp4_a4).
#pragma once
#include <map>
#include <string>

#include "formats/checkpoint.h"
#include "libquant/schemes/scheme.h"

namespace qt::calib {

// Sets SchemeParams::global_scale of every member of each fused group in plan to the minimum of
// the members' own global scales (the scheme's tensor_scale of ck's weight as it is now: after
// any folded smoothing, before GPTQ). Other entries are left as they are.
void share_fused_global_scales(const Checkpoint& ck, std::map<std::string, SchemeParams>& plan);

}  // namespace qt::calib
