// Phi-3's fused projections. Hugging Face stores self_attn.qkv_proj.weight (rows: q, then k, then
// v) and mlp.gate_up_proj.weight (rows: gate, then up, as Phi3MLP's chunk(2) reads them); inside
// quanttool every projection is its own tensor, so that each scheme quantizes q, k, v, gate and up
// as the Llama family's separate projections. The loader splits (zero-copy row views), the hf
// writer fuses back into the names transformers expects.
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/model_config.h"
#include "formats/tensor.h"

namespace qt {

// Replaces every layer's fused tensors of `tensors` by their row blocks under the split names.
// UserError naming `path` for a fused tensor of the wrong shape or dtype.
void split_fused_projections(const ModelConfig& c, std::map<std::string, Tensor>& tensors, const std::string& path);

// The inverse, for writing: the split float tensors of each layer replaced by one deferred
// concatenation under the fused name (layers already fused are left as they are). UserError for
// packed (quantized) parts. convert fuses before quantizing, so that a quantized layout stores
// qkv_proj / gate_up_proj as one weight, as mlx_lm, vLLM and transformers load Phi-3.
void fuse_projections(const ModelConfig& c, std::map<std::string, Tensor>& tensors);

// A quantized folder's fused weights (its normalized description `desc`, formats/layouts/
// quantized.h): each replaced by its parts, every stored tensor of it (codes, scales, biases)
// split into row blocks in proportion to the parts' rows. Every scheme packs whole rows (the
// bitsandbytes blocks too, where a part's values fill whole blocks), so each part's tensors are
// exactly what quantizing the part alone stores. Unquantized fused weights are split as in
// split_fused_projections. UserError naming `path` where a part's rows do not fill whole blocks.
void split_fused_quantized(const ModelConfig& c, std::map<std::string, Tensor>& stored, nlohmann::json& desc,
                           const std::string& path);

}  // namespace qt
