// LlamaModel's block: shared by the batch forward (llama.cpp) and the decode step
// (llama_decode.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "libquant/model/llama.h"

namespace qt {

struct LlamaModel::Layer {
  std::string prefix;  // "model.layers.N."
  // The block's RMSNorm weights where the arch row has them (formats/arch.h BlockNorms; empty
  // where it has none), (1 + w) already folded in for Gemma; q/k norms per head or whole.
  std::vector<float> attn_pre, attn_post, ffn_pre, ffn_post, q_norm, k_norm;
  std::vector<float> sinks;  // gpt_oss: self_attn.sinks, a logit per query head (KVShape::sinks)
  std::unique_ptr<Linear> wq, wk, wv, wo, gate, up, down;  // gate/up/down: null in a sparse layer
  // A sparse layer (ModelConfig::is_moe_layer): the router [n_experts, hidden] and each expert's
  // projections, with their names under `prefix` (what the observer sees).
  struct Expert {
    std::unique_ptr<Linear> gate, up, down;
    std::string gate_name, up_name, down_name;
  };
  std::unique_ptr<Linear> router;
  std::string router_name;
  std::vector<Expert> experts;
};

}  // namespace qt
