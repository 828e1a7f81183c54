// A mixture of experts in an MLX folder: mlx_lm stores a sparse layer's experts stacked, one
// module per projection, <layer>.<switch_mlp>.{gate,up,down}_proj.{weight,scales,biases} with a
// leading [n_experts] dimension (mlx_lm models/qwen3_moe.py and mixtral.py sanitize; SwitchGLU's
// SwitchLinear / QuantizedSwitchLinear), the router an ordinary (quantized) Linear. quanttool
// holds each expert under its HF name; these convert between the two.
#pragma once
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"

namespace qt {

// Each sparse layer's expert tensors of `ck` (packed or not) stacked under mlx_lm's names: the
// stacked tensors, the per-expert names they replace, and ck's quantization entries ("tensors")
// with one entry per stacked module instead of the experts'. UserError when the experts of one
// projection are not stored alike (some quantized, other bits or group sizes).
struct MlxStackedExperts {
  std::map<std::string, Tensor> tensors;
  std::set<std::string> replaced;
  nlohmann::json quant_tensors;
};
MlxStackedExperts stack_mlx_experts(const Checkpoint& ck);

// The reverse on a folder's stored tensors: each stacked tensor becomes n_experts views under the
// experts' HF names; a per-module entry of `quant_block` (config.json "quantization", may be null)
// for a stacked module is copied to each expert's module. UserError naming `dir` for a stacked
// tensor whose leading dimension is not n_experts.
void unstack_mlx_experts(const ModelConfig& c, const std::string& dir, std::map<std::string, Tensor>* stored,
                         nlohmann::json* quant_block);

}  // namespace qt
