// SpectralQuant (VeloxQuant-MLX spectral/; docs/spec/kv-methods.md §SpectralQuant): a calibrated
// eigenvector rotation with per-coordinate scalar codebooks (calibrate --method kv-codebook --kv
// spectral:bits=B).
//
// Per layer, side and kv head, calibration measured the mean μ and the covariance of the vectors
// as the cache sees them (keys after RoPE), and stored its eigenvectors U (rows, descending
// eigenvalue λ_i), s_i = √λ_i, a bit width b_i per coordinate and a Lloyd-Max codebook per width
// trained on the empirical distribution of the standardized coordinates of that width (the
// covariance weighs each sequence's first position, the attention sink, as 128 positions:
// calib/kv_codebook.cpp). The widths
// come from greedy bit allocation under the budget d·B (each next bit to the coordinate whose
// λ_i·(D(b_i) − D(b_i+1)) is largest, D the unit-Gaussian Lloyd-Max MSE): the few high-variance
// "signal" coordinates get more bits and their own codebook, the "noise" coordinates fewer (0 bits:
// dropped, decoded as the mean), and there is no QJL stage. One fp16 per token: the RMS r of its
// standardized coordinates w_i = z_i / s_i — without it the tokens far from the calibration bulk
// (the first token, which most queries attend to) are clipped by codebooks fitted to the bulk
// (2 chunks of wiki.test, values at 3 bits: PPL 34.1 without r against an fp16 cache's 21.4);
// with it the method takes B + 16/d bits per element, turboquant_mse's rate at the same B.
// Encode: z = U (x − μ), w = z / s, r = fp16(‖w‖/√d), code_i = the cell of w_i / r in codebook
// b_i, packed LSB first in coordinate order, then r. Domain = d + 1: decode gives
// [r·s_i·c_{b_i}[code_i] ; 1]; the query becomes
// [U q ; q·μ] (so the score is q·x̂), and values map back as Uᵀ acc[:d] + μ·acc[d] (acc[d] = Σ p_j).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "formats/error.h"
#include "libquant/kv/attend_kernels.h"
#include "libquant/kv/calibrated.h"
#include "libquant/kv/codecs.h"

namespace qt::kv {
namespace {

class SpectralHead final : public Codec {
 public:
  SpectralHead(int d, const CalibratedTables& t, int h, std::string name) : Codec(d, std::move(name)) {
    U_ = t.get(h, "rotation", long(d) * d);
    Ut_ = transposed(U_, d, d);
    mean_ = t.get(h, "mean", d);
    scale_ = t.get(h, "scale", d);
    const auto& bits = t.get(h, "bits", d);
    bits_.resize(d);
    int total = 0;
    for (int i = 0; i < d; ++i) {
      bits_[i] = int(bits[i]);
      if (bits_[i] < 0 || bits_[i] > 8 || float(bits_[i]) != bits[i])
        user_error("{}: bad bit width {} in the tables", name_, bits[i]);
      if (bits_[i] > 0 && !cb_.count(bits_[i])) {
        const int b = bits_[i];
        cb_[b].c = t.get(h, fmt::format("cb{}.centroids", b), 1L << b);
        cb_[b].t = t.get(h, fmt::format("cb{}.thresholds", b), (1L << b) - 1);
      }
      total += bits_[i];
    }
    code_bytes_ = packed_bytes(total, 1);
    bytes_ = code_bytes_ + 2;
    // flat per-coordinate tables for the hot loops: bit offset, s_i·centroids, thresholds
    int64_t bit = 0;
    for (int i = 0; i < d; ++i) {
      off_.push_back(bit), tab_off_.push_back(int(tab_.size()));
      if (bits_[i] == 0) continue;
      const Cb& cb = cb_.at(bits_[i]);
      for (float c : cb.c) tab_.push_back(scale_[i] * c);
      thr_.push_back(&cb.t);
      bit += bits_[i];
    }
  }
  int domain_dim() const override { return d_ + 1; }
  size_t group_bytes() const override { return bytes_; }

  void encode(const float* x, int64_t, uint8_t* out) const override {
    std::memset(out, 0, bytes_);
    float xc[1024], z[1024];
    for (int i = 0; i < d_; ++i) xc[i] = x[i] - mean_[i];
    project_t(xc, Ut_.data(), d_, d_, z);  // z = U (x − μ)
    double ss = 0;
    for (int i = 0; i < d_; ++i) {
      z[i] /= scale_[i];
      ss += double(z[i]) * z[i];
    }
    const float r = round_half(float(std::sqrt(ss / d_)));
    store_half(out + code_bytes_, r);
    if (r == 0) return;
    const float inv = 1.0f / r;
    for (int i = 0, k = 0; i < d_; ++i) {
      const int b = bits_[i];
      if (b == 0) continue;
      // the cell: #{thresholds < x}, as codebook_index counts them, by bisection
      const std::vector<float>& t = *thr_[size_t(k++)];
      const uint32_t idx = uint32_t(std::lower_bound(t.begin(), t.end(), z[i] * inv) - t.begin());
      put_bits_at(out, off_[i], b, idx);
    }
  }

  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    for (int t = 0; t < n; ++t) {
      const uint8_t* p = codes + (j0 + t) * bytes_;
      float* o = out + int64_t(t) * (d_ + 1);
      const float r = load_half(p + code_bytes_);
      for (int i = 0; i < d_; ++i) {
        const int b = bits_[i];
        o[i] = b ? r * tab_[size_t(tab_off_[i]) + get_bits_at(p, off_[i], b)] : 0.0f;
      }
      o[d_] = 1.0f;
    }
  }

  void query_to_domain(const float* q, float* out) const override {
    project_t(q, Ut_.data(), d_, d_, out);
    double m = 0;
    for (int i = 0; i < d_; ++i) m += double(q[i]) * mean_[i];
    out[d_] = float(m);
  }
  void domain_to_head(const float* acc, float* out) const override {
    float y[1024];
    project_t(acc, U_.data(), d_, d_, y);  // Uᵀ acc[:d]
    for (int i = 0; i < d_; ++i) out[i] += y[i] + mean_[i] * acc[d_];
  }

 private:
  struct Cb {
    std::vector<float> c, t;
  };
  std::vector<float> U_, Ut_, mean_, scale_;
  std::vector<int> bits_;
  std::map<int, Cb> cb_;
  std::vector<int64_t> off_;                    // bit offset of coordinate i's code
  std::vector<int> tab_off_;                    // coordinate i's entries in tab_
  std::vector<float> tab_;                      // s_i · c_{b_i}[·], coordinate after coordinate
  std::vector<const std::vector<float>*> thr_;  // thresholds of the coded coordinates, in order
  size_t code_bytes_ = 0, bytes_ = 0;
};

}  // namespace

std::unique_ptr<Codec> make_spectral_codec(const KVContext& ctx, double bits, Side side, const std::string& name) {
  CalibratedTables t(ctx, "spectral", bits, side);
  std::vector<std::unique_ptr<Codec>> heads;
  for (int h = 0; h < t.heads(); ++h) heads.push_back(std::make_unique<SpectralHead>(ctx.head_dim, t, h, name));
  return std::make_unique<PerHeadCodec>(std::move(heads));
}

}  // namespace qt::kv
