// KVCache: where the keys and values of past positions live, and how attention reads them.
//
// The model's block code only calls append() and attend(); a cache *method* decides the storage
// (full precision here; quantized methods encode blocks of K/V per layer and kv head and score
// queries straight from the encoded form). One sequence at a time: positions 0, 1, 2, … are
// appended in order, clear() starts a new sequence.
//
// Layouts the model hands over (row-major, fp32, after RoPE and any q/k norm):
//   k, v : [n, n_kv_heads · head_dim]   rows for positions first_pos … first_pos+n−1
//   q    : [n_q, n_heads · head_dim]    rows for positions first_pos … first_pos+n_q−1
//   out  : [n_q, n_heads · head_dim]    softmax(q·kᵀ · scale, causal) · v per query head
// Query head h uses kv head h / (n_heads / n_kv_heads) (grouped-query attention).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libquant/kv/spec.h"

namespace qt {

struct KVShape {
  int n_layers = 0;
  int n_heads = 0;  // query heads
  int n_kv_heads = 0;
  int head_dim = 0;
  int max_ctx = 0;  // positions the cache must hold
  float scale = 0;  // score scale, 1/sqrt(head_dim) for the Llama family
  // Gemma: scores soft-capped to softcap · tanh(s / softcap) (0: none), and per layer a sliding
  // window (window[l] > 0: a query at p sees keys p − window[l] + 1 … p; empty or 0: all).
  float softcap = 0;
  std::vector<int> window;
  int window_of(int layer) const { return window.empty() ? 0 : window[size_t(layer)]; }
  // gpt_oss: per layer a learned logit per query head that joins each softmax's denominator (its
  // value row is zero: the weights of the real keys sum to less than 1). Empty: none.
  std::vector<std::vector<float>> sinks;
  const float* sinks_of(int layer) const { return sinks.empty() ? nullptr : sinks[size_t(layer)].data(); }
  bool masked(int layer) const { return softcap > 0 || window_of(layer) > 0 || !sinks.empty(); }
  std::vector<float> rope_inv_freq;  // RoPE frequencies (head_dim/2), for codecs of pre-RoPE keys
  // Gemma 3: layers with rope_local[l] != 0 (its sliding layers) rotate by rope_local_inv_freq.
  std::vector<float> rope_local_inv_freq;
  std::vector<uint8_t> rope_local;
  const std::vector<float>& rope_of(int layer) const {
    return !rope_local.empty() && rope_local[size_t(layer)] ? rope_local_inv_freq : rope_inv_freq;
  }
};

class KVCache {
 public:
  virtual ~KVCache() = default;
  const KVShape& shape() const { return shape_; }

  // Forget every position (a new sequence starts at position 0).
  virtual void clear() = 0;
  // Store (encode) K/V of positions first_pos … first_pos+n−1 of `layer`. Positions arrive in
  // order: first_pos equals the number already stored for this layer.
  virtual void append(int layer, const float* k, const float* v, int n, int first_pos) = 0;
  // Causal attention of n_q queries at positions first_pos … first_pos+n_q−1 against every
  // stored position ≤ each query's own (those must have been appended, for this layer, first).
  // Writes `out`; multithreaded over heads and query rows (--threads).
  virtual void attend(int layer, const float* q, int n_q, int first_pos, float* out) const = 0;

  virtual std::string name() const = 0;        // "f32", later "kivi-2", "turboquant-3", …
  virtual double bytes_per_token() const = 0;  // storage per position, all layers, K and V
  // Positions stored for `layer`.
  virtual int size(int layer) const = 0;

 protected:
  explicit KVCache(const KVShape& s) : shape_(s) {}
  KVShape shape_;
};

// The full-precision cache: fp32 keys (stored transposed per kv head, so scores are a small
// GEMM over contiguous key vectors) and fp32 values. Capacity = max_ctx rounded up.
// F16: every value is rounded to fp16 on the way in and stored as IEEE half (2 bytes) — the fp16
// cache llama.cpp and Hugging Face keep by default, computed by the same fast kernel (which
// widens the halves exactly on load). BF16: every value rounded to bf16 and stored in the pair
// layouts of the AVX512-BF16 attention (attention_bf16.h), which also rounds queries and softmax
// weights to bf16 — the cache for `--compute bf16`'s all-bf16 forward.
enum class DenseKv { F32, F16, BF16 };
std::unique_ptr<KVCache> make_f32_kv_cache(const KVShape& shape, DenseKv kind = DenseKv::F32);

// The quantized cache (quant_cache.cpp): per layer and side a method of the table in codec.h,
// full-precision windows, `cache` or `decode` visibility. It keeps only codes and each window's
// tokens, so attend(layer) must follow that layer's append with no other append in between (as
// the model's forward does); an attend it can no longer serve throws std::logic_error.
std::unique_ptr<KVCache> make_quant_kv_cache(const KVShape& shape, const kv::KVConfig& config);

// The cache `config` describes (make_cache.cpp): the fast dense one when every layer is f32 (or
// every layer f16), else the quantized one; keys centered when config.key_center is set.
// UserError for a bad method, parameter or recipe.
std::unique_ptr<KVCache> make_kv_cache(const kv::KVConfig& config, const KVShape& shape);
// Every layer, keys and values, with `method` (a spec such as "f16" or "kivi:bits=2").
std::unique_ptr<KVCache> make_kv_cache(const std::string& method, const KVShape& shape);

}  // namespace qt
