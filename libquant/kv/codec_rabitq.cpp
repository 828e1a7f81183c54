// rabitq (arXiv 2405.12497; extended RaBitQ arXiv 2409.09913 at 2–4 bits;
// docs/spec/kv-methods.md §RaBitQ).
//
// Per vector x (a key; values work the same way): n = ‖x‖, o' = Π x / n with Π a random
// rotation (rot=wht: Walsh–Hadamard with random signs, the "randomized Hadamard"; rot=qr: dense
// QR of a Gaussian). The code is a point of the grid y ∈ {−M, −M+1, …, M}^d, M = (2^B − 1)/2:
//   B = 1: y = sign(o')/2, i.e. the sign bits x̄_b = [o' > 0] of 1-bit RaBitQ;
//   B > 1: y(t) = the grid point nearest t·o', at the t that maximizes cos(y(t), o') — found
//          exactly by sweeping the critical t = k/|o'_i| (k = 1 … 2^(B−1) − 1) where one
//          coordinate moves to the next level (the extended paper's "Algorithm 1").
// Stored (fp16): n and ⟨ŷ, o'⟩ = ⟨y, o'⟩/‖y‖ (for B = 1: ‖o'‖₁/√d = ⟨ō, o⟩). The unbiased
// estimator of ⟨x, q⟩ (Thm 3.2) is  n · ⟨ŷ, Π q⟩ / ⟨ŷ, o'⟩, so the codec's domain is the rotated
// space and decode gives n / (⟨ŷ, o'⟩ ‖y‖) · y (‖y‖ from the codes): attention scores every
// cached token with it against the once-rotated query. RaBitQ's IVF lists and re-ranking belong
// to nearest-neighbour search (finding a few vectors among millions); attention needs every
// token's score, so none are used and nothing is skipped.
//
// Layout per token: d codes of B bits (u = y + M, LSB first), fp16 n, fp16 ⟨ŷ, o'⟩.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "libquant/kv/codecs.h"

namespace qt::kv {
namespace {

class RaBitQ final : public RotatedCodec {
 public:
  RaBitQ(const KVContext& ctx, int bits, const std::string& rot, std::string name)
      : RotatedCodec(ctx.head_dim, std::move(name), ctx.rotation(rot)),
        bits_(bits),
        code_bytes_(packed_bytes(ctx.head_dim, bits)) {
    const float M = float((1 << bits) - 1) / 2.0f;
    for (int u = 0; u < (1 << bits); ++u) level_[u] = float(u) - M;
  }
  size_t group_bytes() const override { return code_bytes_ + 4; }

  void encode(const float* x, int64_t, uint8_t* out) const override {
    std::memset(out, 0, group_bytes());
    const float n = l2_norm(x, d_);
    store_half(out + code_bytes_, n);
    if (n == 0) return;
    float o[1024];
    rot_.apply(x, o);
    for (int i = 0; i < d_; ++i) o[i] /= n;
    uint8_t u[1024];
    const double ip = quantize(o, u);
    pack_codes(out, 0, d_, bits_, u);
    store_half(out + code_bytes_ + 2, float(ip));
  }

  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    for (int t = 0; t < n; ++t) {
      const uint8_t* p = codes + (j0 + t) * group_bytes();
      float* o = out + int64_t(t) * d_;
      uint8_t u[1024];
      unpack_codes(p, 0, d_, bits_, u);
      float y2 = 0;
      for (int i = 0; i < d_; ++i) y2 += level_[u[i]] * level_[u[i]];
      const float ip = load_half(p + code_bytes_ + 2);
      const float f = ip > 0 ? load_half(p + code_bytes_) / (ip * std::sqrt(y2)) : 0.0f;
      for (int i = 0; i < d_; ++i) o[i] = f * level_[u[i]];
    }
  }

 private:
  // The codes u (y = u − M) of the unit vector o and ⟨ŷ, o⟩.
  double quantize(const float* o, uint8_t* u) const {
    const int top = (1 << (bits_ - 1)) - 1;  // magnitude steps above the first level (0.5)
    int lvl[1024];                           // |y_i| = lvl_i + 0.5
    double ip = 0, y2 = 0.25 * d_;
    for (int i = 0; i < d_; ++i) lvl[i] = 0, ip += 0.5 * std::fabs(o[i]);
    if (top > 0) {
      // Events: at t = k/|o_i| coordinate i steps from k − 0.5 to k + 0.5 (⟨y, o⟩ += |o_i|,
      // ‖y‖² += 2k). The best prefix of the sorted events is the best t.
      std::vector<std::pair<double, int>> ev;
      ev.reserve(size_t(d_) * top);
      for (int i = 0; i < d_; ++i)
        if (o[i] != 0)
          for (int k = 1; k <= top; ++k) ev.emplace_back(double(k) / std::fabs(double(o[i])), i);
      std::sort(ev.begin(), ev.end());
      double best = ip / std::sqrt(y2);
      size_t best_n = 0;
      for (size_t e = 0; e < ev.size(); ++e) {
        const int i = ev[e].second;
        ip += std::fabs(double(o[i]));
        y2 += 2.0 * (++lvl[i]);
        const double c = ip / std::sqrt(y2);
        if (c > best) best = c, best_n = e + 1;
      }
      for (int i = 0; i < d_; ++i) lvl[i] = 0;
      for (size_t e = 0; e < best_n; ++e) ++lvl[ev[e].second];
    }
    const int M2 = (1 << bits_) - 1;  // 2M: u = y + M = (2y + 2M)/2
    double dot = 0, n2 = 0;
    for (int i = 0; i < d_; ++i) {
      const int two_y = (o[i] > 0 ? 1 : -1) * (2 * lvl[i] + 1);
      u[i] = uint8_t((two_y + M2) / 2);
      dot += 0.5 * two_y * double(o[i]);
      n2 += 0.25 * two_y * two_y;
    }
    return dot / std::sqrt(n2);
  }

  int bits_;
  size_t code_bytes_;
  float level_[16];
};

}  // namespace

std::unique_ptr<Codec> make_rabitq_codec(const KVContext& ctx, int bits, const std::string& rot,
                                         const std::string& name) {
  return std::make_unique<RaBitQ>(ctx, bits, rot, name);
}

}  // namespace qt::kv
