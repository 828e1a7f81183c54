// CommVQ (arXiv 2506.18879; docs/spec/kv-methods.md §CommVQ): keys as residual VQ codes of the
// *pre-RoPE* key, with RoPE-commutative codebooks (calibrate --method kv-codebook --kv
// commvq:bits=B).
//
// Layout: the model's rotate-half RoPE pairs dims (i, i + d/2) into d/2 planes; RoPE at position
// m rotates plane i by m·θ_i, i.e. multiplies the complex number x_i + j·x_{i+d/2} by e^{j m θ_i}.
// The paper's codebook C (rows = code bits, columns = dims) is made of 2×2 blocks [[x, y], [−y, x]]
// (code rows 2g, 2g+1 × plane i): scaled rotations, which commute with every RoPE block. For a
// one-hot code (one codeword per stage, as here) that is: codeword 2g+1 is codeword 2g turned by
// 90° in every plane (J·u, J = [[0, −1], [1, 0]] per plane) — calibration projects every M-step
// onto that form (calib/kv_codebook.cpp), and R(m)·C = C·R(m) blockwise (test_kv_commvq checks it to
// fp32 rounding). comm=0 skips the projection (free codewords, an ablation).
//
// Per token: the cache hands the fp16-rounded post-RoPE key k at position m; the codec takes it
// back to pre-RoPE, x = R(m)ᵀ k, and encodes x greedily: n stages, each the nearest of 2^cb
// codewords (‖c‖² − 2⟨r, c⟩, ties to the lowest index) of the running residual r (vq_search.h). Stored: n codes
// of cb bits (n·cb/d bits per element; no norm, no scale). Scores: RoPE applied exactly at the
// stored position — decode(j) = R(j)·Σ_s C_s[code_s] in head space (positions are the cache's
// indices), then the query's plain dot product, 32 decoded keys at a time shared by a task's
// queries. The commuting form is what lets the paper fold R(j) into per-codeword products with
// the query (q·R(j)·(J u) = (J R(j) u)·q: the twin codeword needs no own product); at d = 64 and
// 256-codeword stages a per-query table of n·256·d products costs more than decoding every key
// of a 512-token chunk, so keys are decoded (the arithmetic is the same up to rounding order).
// Values: the paper's learned value encoder is not built; commvq encodes keys only (pair it with
// another method for values, e.g. --kv-v turboquant_mse:bits=4).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/error.h"
#include "libquant/kv/calibrated.h"
#include "libquant/kv/codecs.h"
#include "libquant/kv/vq_search.h"

namespace qt::kv {

std::shared_ptr<const RopeAngles> RopeAngles::make(const std::vector<float>& inv_freq, int n_pos) {
  auto r = std::make_shared<RopeAngles>();
  r->half = int(inv_freq.size());
  r->n_pos = n_pos;
  r->cos.resize(size_t(n_pos) * r->half);
  r->sin.resize(size_t(n_pos) * r->half);
  for (int p = 0; p < n_pos; ++p)
    for (int i = 0; i < r->half; ++i) {
      const float a = float(p) * inv_freq[size_t(i)];  // ops::RopeTable's float32 product
      r->cos[size_t(p) * r->half + i] = std::cos(a);
      r->sin[size_t(p) * r->half + i] = std::sin(a);
    }
  return r;
}

void RopeAngles::rotate(const float* x, int64_t pos, float* y, bool inverse) const {
  if (pos < 0 || pos >= n_pos)
    throw std::logic_error(fmt::format("RoPE angles: position {} outside 0..{}", pos, n_pos - 1));
  const float* c = cos.data() + size_t(pos) * half;
  const float* s = sin.data() + size_t(pos) * half;
  for (int i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half], si = inverse ? -s[i] : s[i];
    y[i] = a * c[i] - b * si;
    y[i + half] = b * c[i] + a * si;
  }
}

namespace {

class CommVQHead final : public Codec {
 public:
  CommVQHead(int d, int n, int cb, std::vector<float> codebooks, std::shared_ptr<const RopeAngles> rope,
             std::string name)
      : Codec(d, std::move(name)), n_(n), cb_(cb), k_(1 << cb), C_(std::move(codebooks)), rope_(std::move(rope)) {
    for (int s = 0; s < n_; ++s)
      stage_.push_back(std::make_unique<NearestCodeword>(C_.data() + size_t(s) * k_ * d_, k_, d_));
  }
  size_t group_bytes() const override { return packed_bytes(n_, cb_); }

  void encode(const float*, int64_t, uint8_t*) const override {
    throw std::logic_error(name_ + ": encodes at a position (encode_at): keys are stored before RoPE");
  }
  // n pre-RoPE keys (rows d apart, overwritten by their final residuals) into codes[t·n_ + s]:
  // stage by stage, each row's nearest codeword of its running residual (vq_search.h).
  void encode_pre(float* R, int n, uint8_t* codes) const {
    thread_local std::vector<float> m2;
    thread_local std::vector<int> best;
    m2.resize(size_t(n) * d_), best.resize(size_t(n));
    for (int s = 0; s < n_; ++s) {
      for (size_t i = 0; i < size_t(n) * d_; ++i) m2[i] = -2.0f * R[i];
      stage_[size_t(s)]->search(m2.data(), n, best.data());
      for (int t = 0; t < n; ++t) {
        codes[size_t(t) * n_ + s] = uint8_t(best[t]);
        const float* w = C_.data() + (size_t(s) * k_ + best[t]) * d_;
        float* r = R + size_t(t) * d_;
        for (int i = 0; i < d_; ++i) r[i] -= w[i];
      }
    }
  }
  void encode_tokens_at(const float* x, int n, int64_t pos0, uint8_t* out) const override {
    thread_local std::vector<float> R;
    thread_local std::vector<uint8_t> codes;
    R.resize(size_t(n) * d_);
    codes.resize(size_t(n) * n_);
    for (int t = 0; t < n; ++t)
      rope_->rotate(x + size_t(t) * d_, pos0 + t, R.data() + size_t(t) * d_, /*inverse=*/true);
    encode_pre(R.data(), n, codes.data());
    const size_t gb = group_bytes();
    std::memset(out, 0, size_t(n) * gb);
    for (int t = 0; t < n; ++t) pack_codes(out + size_t(t) * gb, 0, n_, cb_, codes.data() + size_t(t) * n_);
  }
  void encode_at(const float* x, int64_t, int64_t pos, uint8_t* out) const override {
    encode_tokens_at(x, 1, pos, out);
  }
  // The pre-RoPE reconstruction Σ_s C_s[code_s] of one token's codes.
  void sum_codewords(const uint8_t* p, float* y) const {
    uint8_t codes[256];
    unpack_codes(p, 0, n_, cb_, codes);
    std::memcpy(y, C_.data() + size_t(codes[0]) * d_, sizeof(float) * d_);
    for (int s = 1; s < n_; ++s) {
      const float* w = C_.data() + (size_t(s) * k_ + codes[s]) * d_;
      for (int i = 0; i < d_; ++i) y[i] += w[i];
    }
  }
  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    const size_t gb = group_bytes();
    float y[1024];
    for (int t = 0; t < n; ++t) {
      sum_codewords(codes + size_t(j0 + t) * gb, y);
      rope_->rotate(y, j0 + t, out + size_t(t) * d_);
    }
  }

 private:
  int n_, cb_, k_;
  std::vector<float> C_;                                 // C_[stage][codeword][d]
  std::vector<std::unique_ptr<NearestCodeword>> stage_;  // each stage's search (reads C_)
  std::shared_ptr<const RopeAngles> rope_;
};

}  // namespace

std::string commvq_table_method(int cb, bool comm) {
  return std::string("commvq") + (cb != 8 ? fmt::format("_c{}", cb) : "") + (comm ? "" : "_free");
}

std::unique_ptr<Codec> make_commvq_codec(const KVContext& ctx, double bits, int cb, bool comm, Side side,
                                         const std::string& name) {
  const int d = ctx.head_dim;
  if (side != Side::Key)
    user_error("{}: CommVQ encodes keys only (its values need the paper's learned encoder); give values another method",
               name);
  if (d % 2) user_error("{}: RoPE pairs need an even head dimension, not {}", name, d);
  const double nd = bits * d / cb;
  if (nd < 1 || std::fabs(nd - std::round(nd)) > 1e-9 || std::round(nd) > 256)
    user_error(
        "{}: {} bits per element is not a whole number of {}-bit codes per {}-dim key (a multiple of {}/{}, at most "
        "256 codes)",
        name, bits, cb, d, cb, d);
  if (!ctx.rope || ctx.rope->half * 2 != d) user_error("{}: needs the model's RoPE (keys are stored before it)", name);
  const int n = int(std::round(nd));
  CalibratedTables t(ctx, commvq_table_method(cb, comm), bits, side);
  std::vector<std::unique_ptr<Codec>> heads;
  for (int h = 0; h < t.heads(); ++h)
    heads.push_back(
        std::make_unique<CommVQHead>(d, n, cb, t.get(h, "codebooks", long(n) * (1L << cb) * d), ctx.rope, name));
  return std::make_unique<PerHeadCodec>(std::move(heads));
}

}  // namespace qt::kv
