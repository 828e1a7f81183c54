// TurboQuant (arXiv 2504.19874; docs/spec/kv-methods.md §TurboQuant).
//
// turboquant_mse (Algorithm 1): n = ‖x‖ (fp16), y = Π x / n, each coordinate to the nearest
// centroid of the Lloyd-Max codebook of f_d (one coordinate of a random unit vector in R^d,
// computed for this head dimension — docs/spec/lloyd-max.md: it differs from the Gaussian table
// by up to 3% at d = 64). Domain = the rotated space: decode gives n·c[idx], the query is rotated
// once.
// Fractional rates (the paper's §4.3; turboquant-mlx's V3 "mixed"): the first N rotated
// coordinates ("outliers") at H bits, the other d − N at b, each with its own f_d codebook:
// (N·H + (d − N)·b)/d bits. bits=b.5 is N = d/2, H = b + 1 (turboquant-mlx's split; the paper's
// outlier-channel split needs calibration it does not specify); any bits=B with B·d whole is
// N = (B − ⌊B⌋)·d, H = ⌊B⌋ + 1, and n_outlier / outlier_bits set N and H directly. The split is
// fixed: after the rotation every coordinate has the same distribution, so which N carry more
// bits is arbitrary.
//
// turboquant_prod (Algorithm 2): the (b−1)-bit MSE code of y, then the residual r = y − ŷ in
// the rotated domain, γ = ‖r‖ (fp16) and z = sign(S r) with S a d × d i.i.d. Gaussian matrix
// (sketching the rotated residual with S is S' = SΠ on the original one, the same distribution).
// Domain = [rotated (d) | sketch (d)]: decode gives [n·ŷ ; n·γ·√(π/2)/d · z], the query becomes
// [Πq ; SΠq] — the unbiased estimator ⟨q, x̂⟩ + n·γ·√(π/2)/d·⟨SΠq, z⟩ scored directly.
#include <cmath>
#include <cstring>

#include "formats/error.h"
#include "libquant/kv/attend_kernels.h"
#include "libquant/kv/codecs.h"

namespace qt::kv {

void qjl_domain_to_head(const Rotation& rot, const float* acc, const float* S, int d, float* out) {
  float y[1024];
  for (int i = 0; i < d; ++i) y[i] = acc[i];
  attend_kernels().mix_rows(acc + d, S, d, d, d, y);  // + Sᵀ acc[d:]
  rot.inverse(y, y);
  for (int i = 0; i < d; ++i) out[i] += y[i];
}

namespace {

class TurboMse final : public RotatedCodec {
 public:
  TurboMse(const KVContext& ctx, int bits, int n_hi, int bits_hi, const std::string& rot, std::string name)
      : RotatedCodec(ctx.head_dim, std::move(name), ctx.rotation(rot)) {
    bl_ = bits;
    bh_ = bits_hi;
    n_hi_ = n_hi;
    lo_ = ctx.codebook(Density::Sphere, bl_, d_);
    hi_ = ctx.codebook(Density::Sphere, bh_, d_);
    code_bytes_ = packed_bytes(int64_t(n_hi_) * bh_ + int64_t(d_ - n_hi_) * bl_, 1);
  }
  size_t group_bytes() const override { return code_bytes_ + 2; }

  void encode(const float* x, int64_t, uint8_t* out) const override {
    std::memset(out, 0, group_bytes());
    float y[1024];
    const float n = l2_norm(x, d_);
    store_half(out + code_bytes_, n);
    if (n == 0) return;
    rot_.apply(x, y);
    const float inv = 1.0f / n;
    for (int i = 0; i < d_; ++i) y[i] *= inv;
    uint8_t idx[1024];  // the first n_hi_ coordinates at bh_ bits, the rest at bl_
    codebook_indices(hi_.t.data(), int(hi_.t.size()), y, n_hi_, idx);
    codebook_indices(lo_.t.data(), int(lo_.t.size()), y + n_hi_, d_ - n_hi_, idx + n_hi_);
    pack_codes(out, 0, n_hi_, bh_, idx);
    pack_codes(out, int64_t(n_hi_) * bh_, d_ - n_hi_, bl_, idx + n_hi_);
  }

  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    for (int t = 0; t < n; ++t) {
      const uint8_t* p = codes + (j0 + t) * group_bytes();
      const float nn = load_half(p + code_bytes_);
      float* o = out + int64_t(t) * d_;
      uint8_t idx[1024];
      unpack_codes(p, 0, n_hi_, bh_, idx);
      unpack_codes(p, int64_t(n_hi_) * bh_, d_ - n_hi_, bl_, idx + n_hi_);
      for (int i = 0; i < n_hi_; ++i) o[i] = nn * hi_.c[idx[i]];
      for (int i = n_hi_; i < d_; ++i) o[i] = nn * lo_.c[idx[i]];
    }
  }

 private:
  int bl_, bh_, n_hi_;
  KVContext::FloatCodebook lo_, hi_;
  size_t code_bytes_;
};

class TurboProd final : public Codec {
 public:
  TurboProd(const KVContext& ctx, int bits, const std::string& rot, std::string name)
      : Codec(ctx.head_dim, std::move(name)), rot_(ctx.rotation(rot)), bm_(bits - 1) {
    if (bm_ > 0) cb_ = ctx.codebook(Density::Sphere, bm_, d_);
    S_ = ctx.jl(d_, SeedUse::ProdJL);
    St_ = transposed(S_, d_, d_);
    idx_bytes_ = packed_bytes(int64_t(d_) * bm_, 1);
    sign_bytes_ = packed_bytes(d_, 1);
  }
  int domain_dim() const override { return 2 * d_; }
  size_t group_bytes() const override { return idx_bytes_ + sign_bytes_ + 4; }

  void encode(const float* x, int64_t, uint8_t* out) const override {
    std::memset(out, 0, group_bytes());
    const float n = l2_norm(x, d_);
    uint8_t* side = out + idx_bytes_ + sign_bytes_;
    store_half(side, n);
    if (n == 0) return;
    float y[1024], r[1024];
    rot_.apply(x, y);
    for (int i = 0; i < d_; ++i) y[i] /= n;
    uint8_t idx[1024];
    if (bm_ > 0) {
      codebook_indices(cb_.t.data(), int(cb_.t.size()), y, d_, idx);
      pack_codes(out, 0, d_, bm_, idx);
    }
    double g = 0;
    for (int i = 0; i < d_; ++i) {
      r[i] = y[i] - (bm_ > 0 ? cb_.c[idx[i]] : 0.0f);
      g += double(r[i]) * r[i];
    }
    store_half(side + 2, float(std::sqrt(g)));
    float sr[1024];
    project_t(r, St_.data(), d_, d_, sr);
    for (int k = 0; k < d_; ++k)
      if (sr[k] < 0) out[idx_bytes_ + (k >> 3)] |= uint8_t(1u << (k & 7));  // bit set = −1
  }

  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    const float c = std::sqrt(float(M_PI) / 2.0f) / float(d_);
    for (int t = 0; t < n; ++t) {
      const uint8_t* p = codes + (j0 + t) * group_bytes();
      const uint8_t* side = p + idx_bytes_ + sign_bytes_;
      const float nn = load_half(side), gam = load_half(side + 2);
      float* o = out + int64_t(t) * 2 * d_;
      uint8_t idx[1024];
      if (bm_ > 0) unpack_codes(p, 0, d_, bm_, idx);
      for (int i = 0; i < d_; ++i) o[i] = bm_ > 0 ? nn * cb_.c[idx[i]] : 0.0f;
      attend_kernels().expand_signs(p + idx_bytes_, d_, nn * gam * c, o + d_);
    }
  }

  void query_to_domain(const float* q, float* out) const override { queries_to_domain(q, 1, out); }
  void queries_to_domain(const float* q, int n, float* out) const override {
    for (int v = 0; v < n; ++v) rot_.apply(q + int64_t(v) * d_, out + int64_t(v) * 2 * d_);
    attend_kernels().project_rows(out, 2 * d_, n, St_.data(), d_, d_, out + d_, 2 * d_);
  }
  void domain_to_head(const float* acc, float* out) const override {
    qjl_domain_to_head(rot_, acc, S_.data(), d_, out);
  }

 private:
  Rotation rot_;
  int bm_;
  KVContext::FloatCodebook cb_;
  std::vector<float> S_, St_;  // d × d and its transpose
  size_t idx_bytes_, sign_bytes_;
};

}  // namespace

std::unique_ptr<Codec> make_turboquant_mse_codec(const KVContext& ctx, int bits, int n_outlier, int outlier_bits,
                                                 const std::string& rot, const std::string& name) {
  return std::make_unique<TurboMse>(ctx, bits, n_outlier, outlier_bits, rot, name);
}
std::unique_ptr<Codec> make_turboquant_prod_codec(const KVContext& ctx, int bits, const std::string& rot,
                                                  const std::string& name) {
  return std::make_unique<TurboProd>(ctx, bits, rot, name);
}

}  // namespace qt::kv
