// VecInfer (arXiv 2510.06175; docs/spec/kv-methods.md §VecInfer): product vector quantization with
// calibrated codebooks (calibrate --method kv-codebook --kv vecinfer:bits=B).
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
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "formats/error.h"
#include "libquant/cpu_features.h"
#include "libquant/kv/calibrated.h"
#include "libquant/kv/codecs.h"

namespace qt::kv {
namespace {

constexpr int kCentroids = 256;

// The two loops over all 256 centroids (per sub-space, centroid-major ct[s][i][c], ‖c‖² in cn),
// compiled for AVX2 and the baseline and picked at load (they run across the centroids in SIMD
// lanes; multiply and add stay separate instructions, so both versions give the same floats).
// Both run over the centroids in blocks of 32, the block's sums held in registers across the v
// products (the compiler's version of these loops kept them in memory and cleared them with
// `rep stos`), each sum in the same order — start, then the v products in turn, multiply and add
// rounded separately — so the AVX2 version (picked by kernel level) and the scalar one give the
// same floats.
constexpr int kBlock = 32;

// dist[c0..c0+32) = start[...] + Σ_i x[i] · row_i[...], rows kCentroids apart.
void block_sums_scalar(const float* start, const float* x, const float* rows, int v, float* out) {
  for (int c = 0; c < kBlock; ++c) out[c] = start ? start[c] : 0.0f;
  for (int i = 0; i < v; ++i)
    for (int c = 0; c < kBlock; ++c) out[c] += x[i] * rows[size_t(i) * kCentroids + c];
}

__attribute__((target("avx2"))) void block_sums_avx2(const float* start, const float* x, const float* rows, int v,
                                                     float* out) {
  __m256 a0, a1, a2, a3;
  if (start) {
    a0 = _mm256_loadu_ps(start), a1 = _mm256_loadu_ps(start + 8);
    a2 = _mm256_loadu_ps(start + 16), a3 = _mm256_loadu_ps(start + 24);
  } else {
    a0 = a1 = a2 = a3 = _mm256_setzero_ps();
  }
  for (int i = 0; i < v; ++i) {
    const __m256 xi = _mm256_set1_ps(x[i]);
    const float* r = rows + size_t(i) * kCentroids;
    a0 = _mm256_add_ps(a0, _mm256_mul_ps(xi, _mm256_loadu_ps(r)));
    a1 = _mm256_add_ps(a1, _mm256_mul_ps(xi, _mm256_loadu_ps(r + 8)));
    a2 = _mm256_add_ps(a2, _mm256_mul_ps(xi, _mm256_loadu_ps(r + 16)));
    a3 = _mm256_add_ps(a3, _mm256_mul_ps(xi, _mm256_loadu_ps(r + 24)));
  }
  _mm256_storeu_ps(out, a0), _mm256_storeu_ps(out + 8, a1);
  _mm256_storeu_ps(out + 16, a2), _mm256_storeu_ps(out + 24, a3);
}

using BlockSums = void (*)(const float*, const float*, const float*, int, float*);
BlockSums block_sums() { return kernel_level() >= KernelLevel::AVX2 ? block_sums_avx2 : block_sums_scalar; }

void nearest_codes(const float* y, const float* ct, const float* cn, int m, int v, uint8_t* out) {
  const BlockSums sums = block_sums();
  float x[8];  // v ≤ 8
  for (int s = 0; s < m; ++s) {
    for (int i = 0; i < v; ++i) x[i] = -2.0f * y[s * v + i];
    // Lane-wise first minimum over the blocks, then the lowest index among the lanes holding the
    // smallest distance: the first minimum of the whole scan (ties to the lowest index).
    float best[kBlock];
    int at[kBlock];
    for (int c0 = 0; c0 < kCentroids; c0 += kBlock) {
      float dist[kBlock];
      sums(cn + size_t(s) * kCentroids + c0, x, ct + size_t(s) * v * kCentroids + c0, v, dist);
      for (int c = 0; c < kBlock; ++c) {
        const bool take = c0 == 0 || dist[c] < best[c];
        best[c] = take ? dist[c] : best[c];
        at[c] = take ? c0 + c : at[c];
      }
    }
    int b = 0;
    for (int c = 1; c < kBlock; ++c)
      if (best[c] < best[b] || (best[c] == best[b] && at[c] < at[b])) b = c;
    out[s] = uint8_t(at[b]);
  }
}

void build_table(const float* qd, const float* ct, int m, int v, float* table) {
  const BlockSums sums = block_sums();
  for (int s = 0; s < m; ++s)
    for (int c0 = 0; c0 < kCentroids; c0 += kBlock)
      sums(nullptr, qd + s * v, ct + size_t(s) * v * kCentroids + c0, v, table + size_t(s) * kCentroids + c0);
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
  if (side == Side::Key && (d & (d - 1)))
    user_error("{}: the Hadamard transform needs a power-of-two head dimension, not {}", name, d);
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
