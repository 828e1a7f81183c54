// The full-precision KV cache.
#include "libquant/kv/cache.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "formats/error.h"
#include "formats/tensor.h"
#include "libquant/kernels/aligned_buffer.h"
#include "libquant/kernels/bf16.h"
#include "libquant/kv/attention_bf16.h"
#include "libquant/math/ops.h"

namespace qt {
namespace {

// Per (layer, kv head) one block: Kᵀ [head_dim][cap] followed by V [cap][head_dim], in fp32, or
// for the fp16 cache in IEEE half (2 bytes a value, as bytes_per_token says; the attention tiles
// widen them on load, exactly, so the results equal fp16-rounded values held in fp32), or for the
// bf16 cache in bf16 pairs (attention_bf16.h's layout, its own attention).
// Blocks of one layer are consecutive, so ops::attention finds kv head g at g · block values.
class F32Cache final : public KVCache {
 public:
  F32Cache(const KVShape& s, DenseKv kind) : KVCache(s), kind_(kind) {
    if (kind == DenseKv::BF16 && s.head_dim % 2 != 0)
      user_error("kv cache bf16: head_dim {} is odd (keys are stored in pairs of dimensions)", s.head_dim);
    if (s.n_layers <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 || s.max_ctx <= 0 ||
        s.n_heads % s.n_kv_heads != 0)
      user_error("kv cache: invalid shape ({} layers, {} heads, {} kv heads, head_dim {}, ctx {})", s.n_layers,
                 s.n_heads, s.n_kv_heads, s.head_dim, s.max_ctx);
    cap_ = (int64_t(s.max_ctx) + ops::kAttnKeyPad - 1) / ops::kAttnKeyPad * ops::kAttnKeyPad;
    block_ = 2 * cap_ * s.head_dim;
    layer_ = block_ * s.n_kv_heads;
    const size_t bytes = size_t(layer_ * s.n_layers) * (kind_ == DenseKv::F32 ? sizeof(float) : sizeof(uint16_t));
    // Zeroed once: the attention tiles read the key padding past the last position.
    std::memset(buf_.reserve(bytes), 0, bytes);
    n_.assign(s.n_layers, 0);
  }

  void clear() override { std::fill(n_.begin(), n_.end(), 0); }

  void append(int layer, const float* k, const float* v, int n, int first_pos) override {
    const int D = shape_.head_dim, H = shape_.n_kv_heads;
    if (layer < 0 || layer >= shape_.n_layers || first_pos != n_[layer] || first_pos + n > shape_.max_ctx)
      user_error("kv cache: append of positions {}..{} to layer {} holding {} (capacity {})", first_pos,
                 first_pos + n - 1, layer, n_[layer], shape_.max_ctx);
#pragma omp parallel for schedule(static) if (int64_t(n) * H * D >= (1 << 15))
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < n; ++i) {
        const float* kr = k + (int64_t(i) * H + h) * D;
        const float* vr = v + (int64_t(i) * H + h) * D;
        const int64_t p = first_pos + i;
        if (kind_ == DenseKv::BF16) {
          uint16_t* b = data16() + layer * layer_ + h * block_;
          for (int d = 0; d < D; ++d) b[kv::bf16_k_index(cap_, int(p), d)] = kernels::round_bf16(kr[d]);
          for (int d = 0; d < D; ++d) b[kv::bf16_v_index(cap_, D, int(p), d)] = kernels::round_bf16(vr[d]);
        } else if (kind_ == DenseKv::F16) {
          uint16_t* kt = data16() + layer * layer_ + h * block_;
          uint16_t* vb = kt + cap_ * D;
          for (int d = 0; d < D; ++d) kt[d * cap_ + p] = f32_to_f16(kr[d]);
          for (int d = 0; d < D; ++d) vb[p * D + d] = f32_to_f16(vr[d]);
        } else {
          float* kt = data() + layer * layer_ + h * block_;
          float* vb = kt + cap_ * D;
          for (int d = 0; d < D; ++d) kt[d * cap_ + p] = kr[d];
          std::memcpy(vb + p * D, vr, size_t(D) * sizeof(float));
        }
      }
    n_[layer] = first_pos + n;
  }

  void attend(int layer, const float* q, int n_q, int first_pos, float* out) const override {
    if (first_pos + n_q > n_[layer])
      user_error("kv cache: attention for positions up to {} but layer {} holds {}", first_pos + n_q - 1, layer,
                 n_[layer]);
    const int D = shape_.head_dim;
    const int64_t qs = int64_t(shape_.n_heads) * D;
    if (kind_ == DenseKv::BF16)
      return kv::attention_bf16(q, qs, n_q, first_pos, shape_.n_heads, shape_.n_kv_heads, D, shape_.scale,
                                kv::Bf16Layout{data16() + layer * layer_, cap_, block_}, out, qs, shape_.softcap,
                                shape_.window_of(layer), shape_.sinks_of(layer));
    ops::AttnLayout kv{nullptr, nullptr, cap_, D, block_};
    if (kind_ == DenseKv::F16) {
      kv.kt16 = data16() + layer * layer_;
      kv.v16 = kv.kt16 + cap_ * D;
    } else {
      kv.kt = data() + layer * layer_;
      kv.v = kv.kt + cap_ * D;
    }
    if (shape_.masked(layer))  // Gemma's soft-capping / sliding window
      return ops::attention_masked(q, qs, n_q, first_pos, shape_.n_heads, shape_.n_kv_heads, D, shape_.scale,
                                   shape_.softcap, shape_.window_of(layer), kv, out, qs, shape_.sinks_of(layer));
    ops::attention(q, qs, n_q, first_pos, shape_.n_heads, shape_.n_kv_heads, D, shape_.scale, kv, out, qs);
  }

  std::string name() const override { return kind_ == DenseKv::F32 ? "f32" : kind_ == DenseKv::F16 ? "f16" : "bf16"; }
  double bytes_per_token() const override {
    return 2.0 * shape_.n_layers * shape_.n_kv_heads * shape_.head_dim * (kind_ == DenseKv::F32 ? 4 : 2);
  }
  int size(int layer) const override { return n_[layer]; }

 private:
  float* data() const { return static_cast<float*>(buf_.data()); }
  uint16_t* data16() const { return static_cast<uint16_t*>(buf_.data()); }

  DenseKv kind_ = DenseKv::F32;
  int64_t cap_ = 0, block_ = 0, layer_ = 0;
  kernels::AlignedBuffer buf_;
  std::vector<int> n_;
};

}  // namespace

std::unique_ptr<KVCache> make_f32_kv_cache(const KVShape& shape, DenseKv kind) {
  return std::make_unique<F32Cache>(shape, kind);
}

}  // namespace qt
