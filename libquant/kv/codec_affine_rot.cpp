// affine:rot=qr|wht[,qjl=1] — turboquant-mlx's V2 ("rotated", "rot+QJL"; docs/spec/kv-methods.md
// §TurboQuant).
//
// rotated: y = Π x with a random rotation (rot=qr: the dense QR-of-Gaussian Π TurboQuant uses,
// rot=wht: Walsh–Hadamard with random signs), then the affine min–max groups of codec_affine.cpp
// on y (fp16 scale and min per group of G channels, round-half-even codes). turboquant-mlx divides
// by ‖x‖ before quantizing and multiplies the norm back into the scales and biases ("norm baking");
// min–max quantization is scale-equivariant (the codes of y/n equal those of y, and n·scale, n·min
// are what it stores), so quantizing y itself is the same code and costs no norm bytes. Domain =
// the rotated space: the query is rotated once, values rotated back once.
//
// +qjl (qjl=1): a 1-bit QJL sketch of the residual on top, as turboquant-mlx's V2 "rot+QJL":
//   r = y − ŷ, γ = ‖r‖ (fp16), z = sign(S r) (d bits), S a d × d i.i.d. N(0,1) matrix
//   (TurboQuant_prod's, SeedUse::ProdJL), and x̃ = Πᵀ(ŷ + √(π/2)/d · γ · Sᵀ z)
// whose inner product with any q is unbiased over S (TurboQuant_prod's QJL stage). Domain =
// [rotated (d) | sketch (d)]: decode gives [ŷ ; √(π/2)/d·γ·z], the query becomes [Πq ; SΠq].
// Unlike turboquant_prod the sketch is spent on top of all b bits, not instead of one.
//
// Layout per token: the affine codes and group scales/mins of y (codec_affine.cpp's layout),
// then with qjl the d sign bits (bit set = −1) and fp16 γ.
#include <cmath>
#include <cstring>

#include "libquant/kv/attend_kernels.h"
#include "libquant/kv/codecs.h"

namespace qt::kv {
namespace {

class AffineRotated final : public RotatedCodec {
 public:
  AffineRotated(const KVContext& ctx, int bits, int group, const std::string& rot, bool qjl, std::string name)
      : RotatedCodec(ctx.head_dim, std::move(name), ctx.rotation(rot)),
        inner_(make_affine_codec(ctx.head_dim, bits, group, "affine")),
        qjl_(qjl),
        inner_bytes_(inner_->group_bytes()),
        sign_bytes_(qjl ? packed_bytes(ctx.head_dim, 1) : 0) {
    if (qjl_) {
      S_ = ctx.jl(d_, SeedUse::ProdJL);
      St_ = transposed(S_, d_, d_);
    }
  }
  int domain_dim() const override { return qjl_ ? 2 * d_ : d_; }
  size_t group_bytes() const override { return inner_bytes_ + (qjl_ ? sign_bytes_ + 2 : 0); }

  void encode(const float* x, int64_t stride, uint8_t* out) const override {
    std::memset(out, 0, group_bytes());
    float y[1024];
    rot_.apply(x, y);
    inner_->encode(y, stride, out);
    if (!qjl_) return;
    float yh[1024], r[1024], sr[1024];
    inner_->decode(out, 0, 1, yh);
    double g = 0;
    for (int i = 0; i < d_; ++i) {
      r[i] = y[i] - yh[i];
      g += double(r[i]) * r[i];
    }
    uint8_t* signs = out + inner_bytes_;
    store_half(signs + sign_bytes_, float(std::sqrt(g)));
    project_t(r, St_.data(), d_, d_, sr);
    for (int k = 0; k < d_; ++k)
      if (sr[k] < 0) signs[k >> 3] |= uint8_t(1u << (k & 7));  // bit set = −1
  }

  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    const size_t gb = group_bytes();
    const int dd = domain_dim();
    const float c = std::sqrt(float(M_PI) / 2.0f) / float(d_);
    for (int t = 0; t < n; ++t) {
      const uint8_t* p = codes + size_t(j0 + t) * gb;
      float* o = out + int64_t(t) * dd;
      inner_->decode(p, 0, 1, o);
      if (qjl_)
        attend_kernels().expand_signs(p + inner_bytes_, d_, c * load_half(p + inner_bytes_ + sign_bytes_), o + d_);
    }
  }

  void query_to_domain(const float* q, float* out) const override { queries_to_domain(q, 1, out); }
  void queries_to_domain(const float* q, int n, float* out) const override {
    const int dd = domain_dim();
    for (int v = 0; v < n; ++v) rot_.apply(q + int64_t(v) * d_, out + int64_t(v) * dd);
    if (qjl_) attend_kernels().project_rows(out, dd, n, St_.data(), d_, d_, out + d_, dd);
  }
  void domain_to_head(const float* acc, float* out) const override {
    if (!qjl_) return RotatedCodec::domain_to_head(acc, out);
    qjl_domain_to_head(rot_, acc, S_.data(), d_, out);
  }

 private:
  std::unique_ptr<Codec> inner_;  // affine groups in the rotated space
  bool qjl_;
  size_t inner_bytes_, sign_bytes_;
  std::vector<float> S_, St_;  // d × d and its transpose (qjl)
};

}  // namespace

std::unique_ptr<Codec> make_affine_rotated_codec(const KVContext& ctx, int bits, int group, const std::string& rot,
                                                 bool qjl, const std::string& name) {
  return std::make_unique<AffineRotated>(ctx, bits, group, rot, qjl, name);
}

}  // namespace qt::kv
