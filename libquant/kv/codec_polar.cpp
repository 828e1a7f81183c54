// polar (PolarQuant, arXiv 2502.02617; docs/spec/kv-methods.md §PolarQuant): after the shared
// random rotation, each block of 16 coordinates becomes one radius and 15 angles by a 4-level
// recursive polar transform:
//   level 1: pairs (y_2j, y_2j+1) → r_j, ψ_j = atan2 ∈ [0, 2π)   (8 angles, uniform density)
//   level ℓ: pairs of radii (a, b) → √(a² + b²), ψ = atan(b/a) ∈ [0, π/2]  (4, 2, 1 angles,
//            density ∝ sin^(2^(ℓ−1)−1)(2ψ))
// Level-1 angles: `bits`-bit uniform cells (the Lloyd-Max quantizer of a uniform density);
// levels 2–4: Lloyd-Max of their density at max(1, bits − 2) bits; radius fp16. bits = 4 is
// the paper's configuration (62 bits per 16 coordinates = 3.875 bits per element).
// Decode (domain = rotated space): each coordinate = radius × the cos/sin of its ancestors.
#include <cmath>
#include <cstring>

#include "formats/error.h"
#include "libquant/kv/codecs.h"

namespace qt::kv {
namespace {

constexpr int kBlock = 16;

class Polar final : public RotatedCodec {
 public:
  Polar(const KVContext& ctx, int bits, const std::string& rot, std::string name)
      : RotatedCodec(ctx.head_dim, std::move(name), rot == "none" ? Rotation() : ctx.rotation(rot)),
        b1_(bits),
        bu_(std::max(1, bits - 2)) {
    if (d_ % kBlock) user_error("polar: head dimension {} is not a multiple of 16", d_);
    const int L1 = 1 << b1_;
    for (int k = 0; k < L1; ++k) {
      const double a = (k + 0.5) * 2 * M_PI / L1;
      cos1_.push_back(float(std::cos(a)));
      sin1_.push_back(float(std::sin(a)));
    }
    for (int l = 2; l <= 4; ++l) {
      up_[l - 2] = ctx.codebook(Density::PolarAngle, bu_, l);
      for (float a : up_[l - 2].c) {
        cosu_[l - 2].push_back(std::cos(a));
        sinu_[l - 2].push_back(std::sin(a));
      }
    }
    bits_per_block_ = 8 * b1_ + 7 * bu_;
    code_bytes_ = packed_bytes(int64_t(d_ / kBlock) * bits_per_block_, 1);
  }
  size_t group_bytes() const override { return code_bytes_ + size_t(d_ / kBlock) * 2; }

  void encode(const float* x, int64_t, uint8_t* out) const override {
    std::memset(out, 0, group_bytes());
    float y[1024];
    query_to_domain(x, y);  // the same map for stored vectors
    const int L1 = 1 << b1_;
    for (int blk = 0; blk < d_ / kBlock; ++blk) {
      const float* v = y + blk * kBlock;
      int64_t bit = int64_t(blk) * bits_per_block_;
      float r[8];
      for (int j = 0; j < 8; ++j) {
        r[j] = std::hypot(v[2 * j], v[2 * j + 1]);
        double a = std::atan2(double(v[2 * j + 1]), double(v[2 * j]));
        if (a < 0) a += 2 * M_PI;
        const int k = std::min(L1 - 1, int(a / (2 * M_PI) * L1));
        put_bits_at(out, bit, b1_, uint32_t(k));
        bit += b1_;
      }
      for (int l = 2, n = 4; l <= 4; ++l, n /= 2) {
        const auto& cb = up_[l - 2];
        for (int j = 0; j < n; ++j) {
          const float a = std::atan2(r[2 * j + 1], r[2 * j]);  // both ≥ 0: [0, π/2]
          put_bits_at(out, bit, bu_, uint32_t(codebook_index(cb.t.data(), int(cb.t.size()), a)));
          bit += bu_;
          r[j] = std::hypot(r[2 * j], r[2 * j + 1]);
        }
      }
      store_half(out + code_bytes_ + blk * 2, r[0]);
    }
  }

  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    for (int t = 0; t < n; ++t) {
      const uint8_t* p = codes + (j0 + t) * group_bytes();
      float* o = out + int64_t(t) * d_;
      for (int blk = 0; blk < d_ / kBlock; ++blk) {
        const int64_t bit0 = int64_t(blk) * bits_per_block_;
        int64_t bit = bit0 + 8 * b1_ + 7 * bu_;
        float r[8];
        r[0] = load_half(p + code_bytes_ + blk * 2);
        // levels 4, 3, 2: expand radii top-down (their codes sit after level 1's, in order 2, 3, 4)
        int n_at = 1;
        for (int l = 4; l >= 2; --l) {
          bit -= int64_t(n_at) * bu_;  // start of level l's codes
          float nr[8];
          for (int j = 0; j < n_at; ++j) {
            const uint32_t k = get_bits_at(p, bit + int64_t(j) * bu_, bu_);
            nr[2 * j] = r[j] * cosu_[l - 2][k];
            nr[2 * j + 1] = r[j] * sinu_[l - 2][k];
          }
          n_at *= 2;
          std::memcpy(r, nr, sizeof(float) * n_at);
        }
        float* ob = o + blk * kBlock;
        for (int j = 0; j < 8; ++j) {
          const uint32_t k = get_bits_at(p, bit0 + int64_t(j) * b1_, b1_);
          ob[2 * j] = r[j] * cos1_[k];
          ob[2 * j + 1] = r[j] * sin1_[k];
        }
      }
    }
  }

 private:
  int b1_, bu_;
  std::vector<float> cos1_, sin1_;
  KVContext::FloatCodebook up_[3];
  std::vector<float> cosu_[3], sinu_[3];
  int bits_per_block_;
  size_t code_bytes_;
};

}  // namespace

std::unique_ptr<Codec> make_polar_codec(const KVContext& ctx, int bits, const std::string& rot,
                                        const std::string& name) {
  return std::make_unique<Polar>(ctx, bits, rot, name);
}

}  // namespace qt::kv
