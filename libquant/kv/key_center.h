// Key centering: every stored key of layer l, kv head h becomes k − c[l][h], with c a fixed
// per-channel mean measured on calibration text (`calibrate --method key-mean`). A query's scores
// all move by the same q·c, so softmax — and attention — are unchanged in exact arithmetic
// (SageAttention's "smooth K"); what changes is what a quantized cache has to encode. SmolLM2's keys
// carry a few channels with a large mean, which a random rotation spreads over every coordinate of
// every key (TurboQuant), and which per-token scales must cover (affine); centered keys are smaller.
// The same shift applies to every position, encoded or in the full-precision window, so the shift
// stays one constant per query. (Values could be centered exactly too — Σ p_j (v_j − m) + m — but
// on SmolLM2 that made turboquant_mse-4 values worse, +1.6% against +1.1%, so only keys are.)
//
// File: safetensors with "key_mean" F32 [n_layers, n_kv_heads, head_dim] and metadata
// {"format": "quanttool-key-mean", "layers", "kv_heads", "head_dim", "tokens", "text"}; written by
// calibrate --method key-mean (calib/key_mean.h measures the means).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libquant/kv/cache.h"

namespace qt::kv {

struct KeyCenter {
  int layers = 0, kv_heads = 0, head_dim = 0;
  std::vector<float> mean;  // [layers][kv_heads][head_dim]
  const float* at(int layer, int head) const { return mean.data() + (size_t(layer) * kv_heads + head) * head_dim; }
};

// UserError when the file is not a key-mean file or was measured on another shape of model.
std::shared_ptr<const KeyCenter> load_key_center(const std::string& path, const KVShape& shape);
void save_key_center(const std::string& path, const KeyCenter& c, int64_t tokens, const std::string& text);

// `inner` storing centered keys.
std::unique_ptr<KVCache> make_key_centered_cache(std::unique_ptr<KVCache> inner, std::shared_ptr<const KeyCenter> c);

}  // namespace qt::kv
