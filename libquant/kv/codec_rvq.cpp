// rvq (VeloxQuant-MLX quantizers/turboquant_rvq.py; docs/spec/kv-methods.md §RVQ): two scalar
// stages in the rotated domain, unit-variance coordinates y = Π x · √d / ‖x‖:
//   stage 1: b-bit Gaussian Lloyd-Max, ŷ₁ = c¹[i₁];
//   stage 2: the residual r = y − ŷ₁ with a b-bit unit-variance Laplacian Lloyd-Max scaled to
//            σ_r = √MSE₁ (the residual's exact variance; VeloxQuant's Panter–Dite constant is
//            not copied), ŷ₂ = σ_r · c^Lap[i₂].
// Decode (domain = rotated space): (‖x‖/√d)·(ŷ₁ + ŷ₂). 2b bits per coordinate + fp16 norm.
#include <cmath>
#include <cstring>

#include "libquant/kv/codecs.h"

namespace qt::kv {
namespace {

class Rvq final : public RotatedCodec {
 public:
  Rvq(const KVContext& ctx, int bits, const std::string& rot, std::string name)
      : RotatedCodec(ctx.head_dim, std::move(name), ctx.rotation(rot)), b_(bits) {
    g_ = ctx.codebook(Density::Gaussian, bits, 0);
    l_ = ctx.codebook(Density::Laplacian, bits, 0);
    sigma_ = std::sqrt(g_.mse);
    stage_bytes_ = packed_bytes(int64_t(d_) * b_, 1);
  }
  size_t group_bytes() const override { return 2 * stage_bytes_ + 2; }

  void encode(const float* x, int64_t, uint8_t* out) const override {
    std::memset(out, 0, group_bytes());
    const float n = l2_norm(x, d_);
    store_half(out + 2 * stage_bytes_, n);
    if (n == 0) return;
    float y[1024];
    rot_.apply(x, y);
    const float k = std::sqrt(float(d_)) / n;
    for (int i = 0; i < d_; ++i) {
      const float yi = y[i] * k;
      const uint32_t i1 = uint32_t(codebook_index(g_.t.data(), int(g_.t.size()), yi));
      const float r = (yi - g_.c[i1]) / sigma_;
      const uint32_t i2 = uint32_t(codebook_index(l_.t.data(), int(l_.t.size()), r));
      put_bits(out, i, b_, i1);
      put_bits(out + stage_bytes_, i, b_, i2);
    }
  }

  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    for (int t = 0; t < n; ++t) {
      const uint8_t* p = codes + (j0 + t) * group_bytes();
      const float w = load_half(p + 2 * stage_bytes_) / std::sqrt(float(d_));
      float* o = out + int64_t(t) * d_;
      uint8_t i1[1024], i2[1024];
      unpack_codes(p, 0, d_, b_, i1);
      unpack_codes(p + stage_bytes_, 0, d_, b_, i2);
      for (int i = 0; i < d_; ++i) o[i] = w * (g_.c[i1[i]] + sigma_ * l_.c[i2[i]]);
    }
  }

 private:
  int b_;
  KVContext::FloatCodebook g_, l_;
  float sigma_;
  size_t stage_bytes_;
};

}  // namespace

std::unique_ptr<Codec> make_rvq_codec(const KVContext& ctx, int bits, const std::string& rot, const std::string& name) {
  return std::make_unique<Rvq>(ctx, bits, rot, name);
}

}  // namespace qt::kv
