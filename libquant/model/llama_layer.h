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
  std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;
  std::vector<float> post_attn_norm, post_ffn_norm;  // gemma only (its sandwich norms)
  std::unique_ptr<Linear> wq, wk, wv, wo, gate, up, down;
};

}  // namespace qt
