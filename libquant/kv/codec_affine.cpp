// affine: asymmetric min–max groups along the head dimension, per token (what llama.cpp's and
// MLX's quantized caches do, and KIVI's value quantizer): per group of G channels
//   scale = (max − min)/(2^b − 1), stored fp16; min stored fp16;
//   u = clamp(round_half_even((x − min)/scale), 0, 2^b − 1);  x̂ = u·scale + min
// with the stored (fp16-rounded) scale and min used on both sides.
// Layout per token: D codes of b bits (LSB first), then per group fp16 scale, fp16 min.
//
// kivi keys (KIVI §3.2): the same quantizer per *channel* over G consecutive tokens. A group
// of G tokens is one unit: G·D codes (token-major), then per channel fp16 scale, fp16 min.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/error.h"
#include "formats/tensor.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/codecs.h"

namespace qt::kv {
namespace {

struct MinMax {
  float scale, min;  // fp16-rounded
};

MinMax fit(float mn, float mx, int levels) {
  const uint16_t hs = f32_to_f16((mx - mn) / float(levels - 1)), hm = f32_to_f16(mn);
  return {f16_to_f32(hs), f16_to_f32(hm)};
}

inline uint32_t code_of(float x, const MinMax& m, int levels) {
  if (!(m.scale > 0)) return 0;
  const float u = std::nearbyint((x - m.min) / m.scale);
  return uint32_t(std::clamp(u, 0.0f, float(levels - 1)));
}

inline void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

class AffineTokenCodec final : public Codec {
 public:
  AffineTokenCodec(int d, int bits, int group, std::string name)
      : Codec(d, std::move(name)), bits_(bits), group_(group), code_bytes_(packed_bytes(d, bits)) {}
  size_t group_bytes() const override { return code_bytes_ + size_t(d_ / group_) * 4; }

  void encode(const float* x, int64_t, uint8_t* out) const override {
    std::memset(out, 0, group_bytes());
    const int L = 1 << bits_;
    for (int g = 0; g < d_ / group_; ++g) {
      const float* xg = x + g * group_;
      float mn = xg[0], mx = xg[0];
      for (int i = 1; i < group_; ++i) mn = std::min(mn, xg[i]), mx = std::max(mx, xg[i]);
      const MinMax m = fit(mn, mx, L);
      store_f16(out + code_bytes_ + g * 4, m.scale);
      store_f16(out + code_bytes_ + g * 4 + 2, m.min);
      for (int i = 0; i < group_; ++i) put_bits(out, g * group_ + i, bits_, code_of(xg[i], m, L));
    }
  }

  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    for (int t = 0; t < n; ++t) {
      const uint8_t* p = codes + (j0 + t) * group_bytes();
      float* o = out + int64_t(t) * d_;
      uint8_t u[1024];
      unpack_codes(p, 0, d_, bits_, u);
      for (int g = 0; g < d_ / group_; ++g) {
        const float sc = load_f16(p + code_bytes_ + g * 4), mn = load_f16(p + code_bytes_ + g * 4 + 2);
        for (int i = g * group_; i < (g + 1) * group_; ++i) o[i] = float(u[i]) * sc + mn;
      }
    }
  }

 private:
  int bits_, group_;
  size_t code_bytes_;
};

class KiviKeyCodec final : public Codec {
 public:
  KiviKeyCodec(int d, int bits, int group, std::string name)
      : Codec(d, std::move(name)), bits_(bits), group_(group), code_bytes_(packed_bytes(int64_t(d) * group, bits)) {}
  int token_group() const override { return group_; }
  size_t group_bytes() const override { return code_bytes_ + size_t(d_) * 4; }

  void encode(const float* x, int64_t stride, uint8_t* out) const override {
    std::memset(out, 0, group_bytes());
    const int L = 1 << bits_;
    for (int c = 0; c < d_; ++c) {
      float mn = x[c], mx = x[c];
      for (int t = 1; t < group_; ++t) mn = std::min(mn, x[t * stride + c]), mx = std::max(mx, x[t * stride + c]);
      const MinMax m = fit(mn, mx, L);
      store_f16(out + code_bytes_ + c * 4, m.scale);
      store_f16(out + code_bytes_ + c * 4 + 2, m.min);
      for (int t = 0; t < group_; ++t) put_bits(out, int64_t(t) * d_ + c, bits_, code_of(x[t * stride + c], m, L));
    }
  }

  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    int64_t cur = -1;
    float sc[1024], mn[1024];
    for (int i = 0; i < n; ++i) {
      const int64_t j = j0 + i, g = j / group_;
      const uint8_t* p = codes + g * group_bytes();
      if (g != cur) {
        for (int c = 0; c < d_; ++c)
          sc[c] = load_f16(p + code_bytes_ + c * 4), mn[c] = load_f16(p + code_bytes_ + c * 4 + 2);
        cur = g;
      }
      const int t = int(j % group_);
      float* o = out + int64_t(i) * d_;
      uint8_t u[1024];
      unpack_codes(p, int64_t(t) * d_ * bits_, d_, bits_, u);
      for (int c = 0; c < d_; ++c) o[c] = float(u[c]) * sc[c] + mn[c];
    }
  }

 private:
  int bits_, group_;
  size_t code_bytes_;
};

}  // namespace

std::unique_ptr<Codec> make_affine_codec(int d, int bits, int group, const std::string& name) {
  return std::make_unique<AffineTokenCodec>(d, bits, group, name);
}
std::unique_ptr<Codec> make_kivi_key_codec(int d, int bits, int group, const std::string& name) {
  if (d > 1024) user_error("kivi: head dimension {} is larger than 1024", d);
  return std::make_unique<KiviKeyCodec>(d, bits, group, name);
}

}  // namespace qt::kv
