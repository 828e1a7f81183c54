// Phi-3's fused projections. Hugging Face stores self_attn.qkv_proj.weight (rows: q, then k, then
// v) and mlp.gate_up_proj.weight (rows: gate, then up, as Phi3MLP's chunk(2) reads them); inside
// quanttool every projection is its own tensor, so that each scheme quantizes q, k, v, gate and up
// as the Llama family's separate projections. The loader splits (zero-copy row views), the hf
// writer fuses back into the names transformers expects.
#pragma once
#include <map>
#include <string>

#include "formats/model_config.h"
#include "formats/tensor.h"

namespace qt {

// Replaces every layer's fused tensors of `tensors` by their row blocks under the split names.
// UserError naming `path` for a fused tensor of the wrong shape or dtype.
void split_fused_projections(const ModelConfig& c, std::map<std::string, Tensor>& tensors,
                             const std::string& path);

// The inverse, for writing: the split float tensors of each layer replaced by one deferred
// concatenation under the fused name. UserError for packed (quantized) parts.
void fuse_projections(const ModelConfig& c, std::map<std::string, Tensor>& tensors);

}  // namespace qt
