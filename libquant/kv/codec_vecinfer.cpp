// VecInfer (arXiv 2510.06175, METHODS.md B.6): product vector quantization with calibrated
// codebooks (calibrate --method kv-codebook --kv vecinfer:bits=B).
//
// Keys: per-channel smoothing λ_i = √max_t|K[t,i]| (calibration) and an orthonormal Walsh–
// Hadamard H, k̃ = H (k / λ) — the query gets the inverse, q̃ = H (q ⊙ λ), so q̃·k̃ = q·k exactly.
// k̃ is cut into d/v sub-vectors of v dims, each replaced by the index of its nearest of 256
// centroids (k-means on the transformed calibration keys, one codebook per sub-space, layer and
// kv head): one byte per sub-vector, 8/v bits per element (bits 1: v = 8, 2: v = 4, 4: v = 2), no
// per-token scale or norm. Scores never decode a key: per query a table T[s][c] = ⟨q̃_s, C_s[c]⟩
// (d·256 multiply-adds), then Σ_s T[s][code_s] per key (asymmetric distance computation).
// Values: the same product VQ in head space (own codebooks, no transform, as the paper), decoded
// tile by tile and mixed like the other methods' values.
// Encoding: nearest centroid by ‖c‖² − 2⟨x, c⟩ (ties to the lowest index), the rule k-means
// trained with up to the rounding of the expansion.
#include <cmath>
#include <cstring>

#include "formats/error.h"
#include "libquant/kv/calibrated.h"
#include "libquant/kv/codecs.h"

namespace qt::kv {
namespace {

constexpr int kCentroids = 256;

// The two loops over all 256 centroids (per sub-space, centroid-major ct[s][i][c], ‖c‖² in cn),
// compiled for AVX2 and the baseline and picked at load (they run across the centroids in SIMD
// lanes; multiply and add stay separate instructions, so both versions give the same floats).
__attribute__((target_clones("avx2", "default")))
void nearest_codes(const float* y, const float* ct, const float* cn, int m, int v, uint8_t* out) {
  float dist[kCentroids];
  for (int s = 0; s < m; ++s) {
    const float* c2 = cn + size_t(s) * kCentroids;
    for (int c = 0; c < kCentroids; ++c) dist[c] = c2[c];
    for (int i = 0; i < v; ++i) {
      const float xi = -2.0f * y[s * v + i];
      const float* row = ct + (size_t(s) * v + i) * kCentroids;
      for (int c = 0; c < kCentroids; ++c) dist[c] += xi * row[c];
    }
    int best = 0;
    for (int c = 1; c < kCentroids; ++c)
      if (dist[c] < dist[best]) best = c;
    out[s] = uint8_t(best);
  }
}

__attribute__((target_clones("avx2", "default")))
void build_table(const float* qd, const float* ct, int m, int v, float* table) {
  for (int s = 0; s < m; ++s) {
    float* t = table + size_t(s) * kCentroids;
    for (int c = 0; c < kCentroids; ++c) t[c] = 0.0f;
    for (int i = 0; i < v; ++i) {
      const float qi = qd[s * v + i];
      const float* row = ct + (size_t(s) * v + i) * kCentroids;
      for (int c = 0; c < kCentroids; ++c) t[c] += qi * row[c];
    }
  }
}

class VecInferHead final : public Codec {
 public:
  VecInferHead(int d, int v, bool key, std::vector<float> lambda, const std::vector<float>& cb, std::string name)
      : Codec(d, std::move(name)), v_(v), m_(d / v), key_(key), lambda_(std::move(lambda)), cb_(cb) {
    // centroid-major per sub-space for the encoder: ct_[s][i][c], and ‖c‖²
    ct_.resize(cb_.size());
    cn_.assign(size_t(m_) * kCentroids, 0.0f);
    for (int s = 0; s < m_; ++s)
      for (int c = 0; c < kCentroids; ++c)
        for (int i = 0; i < v_; ++i) {
          const float x = cb_[(size_t(s) * kCentroids + c) * v_ + i];
          ct_[(size_t(s) * v_ + i) * kCentroids + c] = x;
          cn_[size_t(s) * kCentroids + c] += x * x;
        }
    inv_sqrt_d_ = 1.0f / std::sqrt(float(d));
  }
  size_t group_bytes() const override { return size_t(m_); }

  // k̃ = H (k / λ) / √d (keys), the vector itself (values).
  void transform(const float* x, float* y) const {
    if (!key_) {
      std::memcpy(y, x, sizeof(float) * d_);
      return;
    }
    for (int i = 0; i < d_; ++i) y[i] = x[i] / lambda_[i];
    fwht(y, d_);
    for (int i = 0; i < d_; ++i) y[i] *= inv_sqrt_d_;
  }

  void encode(const float* x, int64_t, uint8_t* out) const override {
    float y[1024];
    transform(x, y);
    nearest_codes(y, ct_.data(), cn_.data(), m_, v_, out);
  }

  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    for (int t = 0; t < n; ++t) {
      const uint8_t* p = codes + (j0 + t) * m_;
      float* o = out + int64_t(t) * d_;
      for (int s = 0; s < m_; ++s)
        std::memcpy(o + s * v_, cb_.data() + (size_t(s) * kCentroids + p[s]) * v_, sizeof(float) * v_);
    }
  }

  // q̃ = H (q ⊙ λ) / √d: the inverse transform, folded into the query.
  void query_to_domain(const float* q, float* out) const override {
    if (!key_) return Codec::query_to_domain(q, out);
    for (int i = 0; i < d_; ++i) out[i] = q[i] * lambda_[i];
    fwht(out, d_);
    for (int i = 0; i < d_; ++i) out[i] *= inv_sqrt_d_;
  }

  int table_dim() const override { return key_ ? m_ * kCentroids : 0; }
  void query_table(const float* qd, float* table) const override { build_table(qd, ct_.data(), m_, v_, table); }
  // Four keys at a time: four independent chains of table reads and adds (one key's sum is a
  // chain of d/v dependent adds, latency-bound alone); each key's sum keeps its order.
  void score_codes(const float* table, const uint8_t* codes, int64_t j0, int n, float* out) const override {
    const uint8_t* p = codes + j0 * m_;
    int t = 0;
    for (; t + 4 <= n; t += 4, p += 4 * m_) {
      float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
      for (int s = 0; s < m_; ++s) {
        const float* row = table + size_t(s) * kCentroids;
        a0 += row[p[s]], a1 += row[p[m_ + s]], a2 += row[p[2 * m_ + s]], a3 += row[p[3 * m_ + s]];
      }
      out[t] = a0, out[t + 1] = a1, out[t + 2] = a2, out[t + 3] = a3;
    }
    for (; t < n; ++t, p += m_) {
      float acc = 0.0f;
      for (int s = 0; s < m_; ++s) acc += table[size_t(s) * kCentroids + p[s]];
      out[t] = acc;
    }
  }

 private:
  int v_, m_;
  bool key_;
  std::vector<float> lambda_, cb_, ct_, cn_;
  float inv_sqrt_d_;
};

}  // namespace

std::unique_ptr<Codec> make_vecinfer_codec(const KVContext& ctx, int bits, Side side, const std::string& name) {
  const int d = ctx.head_dim, v = 8 / bits;
  if (d % v) user_error("{}: head dimension {} is not a multiple of the sub-vector size {}", name, d, v);
  if (side == Side::Key && (d & (d - 1))) user_error("{}: the Hadamard transform needs a power-of-two head dimension, not {}", name, d);
  CalibratedTables t(ctx, "vecinfer", bits, side);
  std::vector<std::unique_ptr<Codec>> heads;
  for (int h = 0; h < t.heads(); ++h) {
    std::vector<float> lambda;
    if (side == Side::Key) lambda = t.get(h, "lambda", d);
    heads.push_back(std::make_unique<VecInferHead>(d, v, side == Side::Key, std::move(lambda),
                                                   t.get(h, "codebooks", long(d / v) * kCentroids * v), name));
  }
  return std::make_unique<PerHeadCodec>(std::move(heads));
}

}  // namespace qt::kv
