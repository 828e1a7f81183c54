// qjl (arXiv 2406.03482; docs/spec/kv-methods.md §QJL): the 1-bit Johnson–Lindenstrauss sketch of a
// key, z = sign(S k) ∈ {±1}^m, plus ‖k‖ (fp16). S is m × d Gaussian, orthogonalized per d × d block
// as the reference code does. The asymmetric estimator is scored directly:
//   q · k ≈ √(π/2)/m · ‖k‖ · ⟨S q, z⟩
// (domain = the m-dim sketch space; the query is sketched once). For values the same code
// gives the unbiased reconstruction √(π/2)/m · ‖v‖ · Sᵀ z (mixed in the sketch space, mapped
// back with Sᵀ once per query).
// Not here: the reference's per-block outlier channels with their own sketch.
#include <cmath>
#include <cstring>

#include "libquant/kv/attend_kernels.h"
#include "libquant/kv/codecs.h"

namespace qt::kv {
namespace {

class Qjl final : public Codec {
 public:
  Qjl(const KVContext& ctx, int m, std::string name)
      : Codec(ctx.head_dim, std::move(name)),
        m_(m),
        S_(ctx.jl(m, SeedUse::JL)),
        St_(transposed(S_, m, d_)),
        sign_bytes_(packed_bytes(m, 1)) {}
  int domain_dim() const override { return m_; }
  size_t group_bytes() const override { return sign_bytes_ + 2; }

  void encode(const float* x, int64_t, uint8_t* out) const override {
    std::memset(out, 0, group_bytes());
    store_half(out + sign_bytes_, l2_norm(x, d_));
    std::vector<float> sx(m_);
    project_t(x, St_.data(), d_, m_, sx.data());
    for (int k = 0; k < m_; ++k)
      if (sx[k] < 0) out[k >> 3] |= uint8_t(1u << (k & 7));  // bit set = −1
  }

  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    const float c = std::sqrt(float(M_PI) / 2.0f) / float(m_);
    for (int t = 0; t < n; ++t) {
      const uint8_t* p = codes + (j0 + t) * group_bytes();
      attend_kernels().expand_signs(p, m_, c * load_half(p + sign_bytes_), out + int64_t(t) * m_);
    }
  }

  void query_to_domain(const float* q, float* out) const override { queries_to_domain(q, 1, out); }
  void queries_to_domain(const float* q, int n, float* out) const override {
    attend_kernels().project_rows(q, d_, n, St_.data(), d_, m_, out, m_);
  }
  void domain_to_head(const float* acc, float* out) const override {
    attend_kernels().mix_rows(acc, S_.data(), d_, m_, d_, out);
  }

 private:
  int m_;
  std::vector<float> S_, St_;  // m × d and its transpose (the projections' broadcast form)
  size_t sign_bytes_;
};

}  // namespace

std::unique_ptr<Codec> make_qjl_codec(const KVContext& ctx, int m, const std::string& name) {
  return std::make_unique<Qjl>(ctx, m, name);
}

}  // namespace qt::kv
