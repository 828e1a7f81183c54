// The decoder's tensors as the arch row names them (formats/arch.h): what every device's loader
// reads — the CPU's LlamaModel and the GPU's GpuModel take the same norms, biases and projection
// names from here and differ only in how they hold them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/checkpoint.h"

namespace qt {

// A vector of n values (a bias, a norm) as fp32. UserError for a wrong size.
std::vector<float> read_vector(const Checkpoint& ck, const std::string& name, int64_t n);

// An RMSNorm weight of n values as fp32, with Gemma's (1 + w) folded in (transformers computes
// 1 + w in float, so folding at load gives the same scale). UserError for a wrong size.
std::vector<float> read_norm(const Checkpoint& ck, const std::string& name, int64_t n);

// A dense layer's projection: its weight's name, its bias's (empty: none) and [out, in].
struct ProjTensor {
  std::string weight, bias;
  int64_t out = 0, in = 0;
};

// One layer's tensors: the norms the row has (empty where it has none), q/k norms per head or over
// the whole projection, and the projections (gate/up/down: a dense FFN; a mixture-of-experts layer
// has its own names in MoeNames).
struct BlockTensors {
  std::string prefix;  // "model.layers.N."
  std::vector<float> attn_pre, attn_post, ffn_pre, ffn_post, q_norm, k_norm;
  ProjTensor q, k, v, o, gate, up, down;
};
BlockTensors read_block_tensors(const Checkpoint& ck, int layer);

// The projections of block `layer` that calibration runs and quantizes, named as the model's
// observer sees them after the layer prefix ("self_attn.q_proj.weight"), in the order the forward
// pass reads them: q, k, v, o, then the dense FFN's gate, up, down or, in a sparse layer, each
// expert's gate, up, down (the router is not among them: it stays float, see apps' convert).
std::vector<std::string> block_projections(const ModelConfig& c, int layer);

// The projection of the same block that reads the same input as `proj` and runs first (k, v → q;
// up → gate; an expert's up → its gate); "" when `proj` is the first reader of its input.
std::string shared_input_leader(const ModelConfig& c, const std::string& proj);

// The output head is the embedding table: tied in the config, or no lm_head tensor stored.
bool head_is_embedding(const Checkpoint& ck);

}  // namespace qt
