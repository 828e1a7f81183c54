// Rotation-based KV methods, each against a scalar reference written here from its formulas:
//  * affine:rot=qr|wht[,qjl=1] (turboquant-mlx's V2): the rotation against Π x in double, the affine
//    codes of the rotated vector, the QJL residual sketch and γ, the score and the reconstruction;
//    the QJL stage unbiased over S and smaller in score error than the rotation alone;
//  * turboquant_mse at any fractional rate: codes against the two f_d codebooks, bits=2.5/3.5
//    byte-identical to their n_outlier/outlier_bits spelling, MSE against the weighted theory;
//  * rabitq 1–4 bits: the sign code and ⟨ō, o⟩ of the paper, the extended code's t optimal over a
//    dense sweep, the estimator unbiased over many random vectors (and the uncorrected one not);
//  * bytes per token exact (codecs and VeloxQuant-MLX's 1-bit-keys + turboquant_mse-4 pairing);
//  * --kv-stats: the cache's per-layer cos, relative MSE, score error and attention TV against
//    the same quantities computed here from reconstructions; the CLI's table and JSON;
//  * bad options: UserError (exit 2 through the CLI, one line).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "formats/tensor.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/codecs.h"
#include "libquant/kv/kv_stats.h"
#include "libquant/kv/lloyd_max.h"
#include "libquant/kv/random.h"
#include "tests/support.h"

namespace qt {
namespace {

using namespace qt::kv;
constexpr int D = 64;

KVContext ctx(uint64_t seed = 42) {
  KVContext c;
  c.head_dim = D;
  c.seed = seed;
  return c;
}
std::unique_ptr<Codec> codec(const std::string& spec, Side s = Side::Key, uint64_t seed = 42) {
  return make_codec(parse_kv_spec(spec, "test"), s, ctx(seed));
}
float h(float v) { return f16_to_f32(f32_to_f16(v)); }

std::vector<float> gauss(std::mt19937& g, int n, float outlier = 0) {
  std::normal_distribution<float> nd;
  std::vector<float> x(n);
  for (float& v : x) v = nd(g);
  if (outlier != 0) x[3] += outlier;  // a large channel, as real keys have
  return x;
}

// Π x in double from the definition: dense = the stored matrix's rows; wht = H (s ⊙ x)/√d with
// the Sylvester Hadamard matrix H_ij = (−1)^popcount(i & j).
std::vector<double> rotate_ref(const std::string& kind, const std::vector<float>& x, uint64_t seed = 42) {
  const Rotation r(kind, D, seed);
  std::vector<double> y(D, 0.0);
  for (int i = 0; i < D; ++i)
    for (int j = 0; j < D; ++j)
      y[i] += kind == "dense"
                  ? double(r.matrix()[size_t(i) * D + j]) * x[j]
                  : (__builtin_popcount(i & j) & 1 ? -1.0 : 1.0) * r.matrix()[j] * x[j] / std::sqrt(double(D));
  return y;
}

// The codec's own rotation of x (query_to_domain's first d floats), checked against the
// definition, so that the codes below can be recomputed bit-exactly from the same floats.
std::vector<float> rotated(const Codec& c, const std::string& kind, const std::vector<float>& x) {
  std::vector<float> dom(c.domain_dim());
  c.query_to_domain(x.data(), dom.data());
  const auto ref = rotate_ref(kind, x);
  for (int i = 0; i < D; ++i)
    EXPECT_NEAR(dom[i], ref[i], 2e-5 * (1 + std::fabs(ref[i]))) << kind << " coordinate " << i;
  return std::vector<float>(dom.begin(), dom.begin() + D);
}

double dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += double(a[i]) * b[i];
  return s;
}

// ---- TurboQuant V2: affine:rot=qr|wht[,qjl=1] -------------------------------------------------

// The affine groups of codec_affine.cpp's header applied to y: ŷ (what decode must give).
std::vector<float> affine_ref(const std::vector<float>& y, int bits, int group) {
  std::vector<float> out(D);
  const int L = 1 << bits;
  for (int g0 = 0; g0 < D; g0 += group) {
    float mn = y[g0], mx = y[g0];
    for (int i = g0; i < g0 + group; ++i) mn = std::min(mn, y[i]), mx = std::max(mx, y[i]);
    const float sc = h((mx - mn) / float(L - 1)), m = h(mn);
    for (int i = g0; i < g0 + group; ++i) {
      const float u = sc > 0 ? std::clamp(std::nearbyint((y[i] - m) / sc), 0.0f, float(L - 1)) : 0.0f;
      out[i] = u * sc + m;
    }
  }
  return out;
}

TEST(KvPartA, AffineRotatedMatchesFormulas) {
  std::mt19937 g(1);
  const std::vector<float> S = gaussian_matrix(D, D, sub_seed(42, SeedUse::ProdJL), false);  // TurboQuant_prod's S
  const float c = float(std::sqrt(M_PI / 2) / D);
  for (const std::string rot : {"qr", "wht"})
    for (int bits : {3, 4})
      for (int qjl : {0, 1}) {
        const std::string spec = fmt::format("affine:bits={},group=32,rot={},qjl={}", bits, rot, qjl);
        const std::string kind = rot == "qr" ? "dense" : "wht";
        auto cd = codec(spec);
        ASSERT_EQ(cd->domain_dim(), qjl ? 2 * D : D) << spec;
        // bytes: d b-bit codes + (fp16 scale, fp16 min) per 32 channels [+ d sign bits + fp16 γ]
        EXPECT_EQ(cd->group_bytes(), size_t(D * bits / 8 + 2 * 4 + (qjl ? D / 8 + 2 : 0))) << spec;
        for (int trial = 0; trial < 20; ++trial) {
          const auto x = gauss(g, D, trial % 2 ? 9.0f : 0.0f), q = gauss(g, D);
          std::vector<uint8_t> code(cd->group_bytes());
          cd->encode(x.data(), D, code.data());
          const auto y = rotated(*cd, kind, x);
          const auto yh = affine_ref(y, bits, 32);
          std::vector<float> dec(cd->domain_dim());
          cd->decode(code.data(), 0, 1, dec.data());
          for (int i = 0; i < D; ++i) ASSERT_EQ(dec[i], yh[i]) << spec << " coordinate " << i;
          // The residual sketch: γ = ‖y − ŷ‖, z = sign(S r), scaled by √(π/2)/d · γ.
          double gam = 0;
          std::vector<double> r(D), sr(D, 0.0);
          for (int i = 0; i < D; ++i) r[i] = double(y[i]) - yh[i], gam += r[i] * r[i];
          gam = std::sqrt(gam);
          for (int k = 0; k < D; ++k)
            for (int i = 0; i < D; ++i) sr[k] += double(S[size_t(k) * D + i]) * r[i];
          if (qjl)
            for (int k = 0; k < D; ++k) {
              if (std::fabs(sr[k]) < 1e-4 * gam) continue;  // a sign float rounding may flip
              ASSERT_NEAR(dec[D + k], (sr[k] < 0 ? -1 : 1) * c * h(float(gam)), 1e-7) << spec << " sign " << k;
            }
          // Score: ⟨Πq, ŷ⟩ + √(π/2)/d · γ · ⟨SΠq, z⟩ from the reference pieces.
          const auto pq = rotate_ref(kind, q);
          double want = 0, mag = 0;
          for (int i = 0; i < D; ++i) want += pq[i] * yh[i], mag += std::fabs(pq[i] * yh[i]);
          if (qjl)
            for (int k = 0; k < D; ++k) {
              double spq = 0;
              for (int i = 0; i < D; ++i) spq += double(S[size_t(k) * D + i]) * pq[i];
              want += spq * dec[D + k], mag += std::fabs(spq * dec[D + k]);
            }
          std::vector<float> qd(cd->domain_dim());
          cd->query_to_domain(q.data(), qd.data());
          EXPECT_NEAR(dot(qd.data(), dec.data(), cd->domain_dim()), want, 1e-5 * mag) << spec;
          // Reconstruction in head space: Πᵀ(ŷ + Sᵀ·sketch), whose ⟨q, ·⟩ is the same score.
          std::vector<float> xr(D);
          cd->reconstruct(code.data(), 0, xr.data());
          EXPECT_NEAR(dot(q.data(), xr.data(), D), want, 1e-5 * mag) << spec;
        }
      }
}

// ⟨q, x̃⟩ − ⟨q, x⟩ over many seeds (S and Π random) and vectors: rot+QJL is unbiased, and its
// error variance is QJL's (arXiv 2406.03482 Lemma 3, m = d Gaussian rows; docs/spec/kv-methods.md
// §QJL): per vector
//   Var = ((π/2)·γ²·‖q‖² − ⟨q, r⟩²)/d,  r = x − (the rotated code alone), γ = ‖r‖,
// which is (π/2)× the rotation's own squared error ⟨q, r⟩² when r points anywhere (so at d = 64
// the sketch trades bias for variance rather than removing error: results/kv.md, the rot+QJL rows).
TEST(KvPartA, AffineQjlCorrectionIsUnbiasedWithQjlVariance) {
  std::mt19937 g(2);
  double s = 0, s2 = 0, pred = 0;
  const int seeds = 200, per = 10;
  for (int sd = 0; sd < seeds; ++sd) {
    auto plain = codec("affine:bits=3,rot=qr", Side::Key, 1000 + sd),
         corr = codec("affine:bits=3,rot=qr,qjl=1", Side::Key, 1000 + sd);
    for (int i = 0; i < per; ++i) {
      const auto x = gauss(g, D), w = gauss(g, D);
      std::vector<float> q(D);
      for (int d = 0; d < D; ++d) q[d] = 0.7f * x[d] / 8.0f + w[d] / 8.0f;
      std::vector<uint8_t> cp(plain->group_bytes()), cc(corr->group_bytes());
      std::vector<float> xp(D), xc(D), r(D);
      plain->encode(x.data(), D, cp.data());
      plain->reconstruct(cp.data(), 0, xp.data());
      corr->encode(x.data(), D, cc.data());
      corr->reconstruct(cc.data(), 0, xc.data());
      for (int d = 0; d < D; ++d) r[d] = x[d] - xp[d];
      const double e = dot(q.data(), xc.data(), D) - dot(q.data(), x.data(), D);
      const double qr = dot(q.data(), r.data(), D), g2 = dot(r.data(), r.data(), D), q2 = dot(q.data(), q.data(), D);
      s += e, s2 += e * e, pred += (M_PI / 2 * g2 * q2 - qr * qr) / D;
    }
  }
  const double n = seeds * per, mean = s / n, var = s2 / n - mean * mean;
  EXPECT_LT(std::fabs(mean), 4 * std::sqrt(var / n));
  EXPECT_NEAR(s2 / pred, 1.0, 0.1) << "measured " << s2 / n << ", QJL's variance " << pred / n;
}

// ---- turboquant_mse at any fractional rate -----------------------------------------------------

TEST(KvPartA, TurboQuantFractionalMatchesFormulas) {
  std::mt19937 g(3);
  struct Case {
    std::string spec;
    int b, n_hi, h;
  } cases[] = {
      {"turboquant_mse:bits=2.25", 2, 16, 3},          {"turboquant_mse:bits=2.75", 2, 48, 3},
      {"turboquant_mse:bits=3.25", 3, 16, 4},          {"turboquant_mse:bits=2,n_outlier=8,outlier_bits=4", 2, 8, 4},
      {"turboquant_mse:bits=1.5,rot=dense", 1, 32, 2}, {"turboquant_mse:bits=3,n_outlier=64", 3, 64, 4}};
  for (auto& cs : cases) {
    auto cd = codec(cs.spec);
    // bytes: N·H + (d − N)·b bits of codes, then the fp16 norm
    EXPECT_EQ(cd->group_bytes(), size_t((cs.n_hi * cs.h + (D - cs.n_hi) * cs.b + 7) / 8 + 2)) << cs.spec;
    const Codebook lo = lloyd_max(Density::Sphere, 1 << cs.b, D), hi = lloyd_max(Density::Sphere, 1 << cs.h, D);
    const std::string kind = cs.spec.find("dense") != std::string::npos ? "dense" : "wht";
    for (int trial = 0; trial < 20; ++trial) {
      const auto x = gauss(g, D, 5.0f);
      std::vector<uint8_t> code(cd->group_bytes());
      cd->encode(x.data(), D, code.data());
      const auto y = rotated(*cd, kind, x);
      const float n = l2_norm(x.data(), D), nh = h(n);
      std::vector<float> dec(D);
      cd->decode(code.data(), 0, 1, dec.data());
      for (int i = 0; i < D; ++i) {
        const Codebook& cb = i < cs.n_hi ? hi : lo;
        const float yi = y[i] * (1.0f / n);
        int k = 0;  // the nearest centroid: count the thresholds below
        for (double t : cb.thresholds) k += yi > float(t);
        ASSERT_EQ(dec[i], nh * float(cb.centroids[k])) << cs.spec << " coordinate " << i;
      }
    }
    // Relative MSE: each coordinate at its width's d·MSE(f_d, b) (lloyd-max.md), weighted by the
    // counts.
    const double dmse[] = {0, 0.3584, 0.1145, 0.0334, 0.0091};
    const double want = (cs.n_hi * dmse[cs.h] + (D - cs.n_hi) * dmse[cs.b]) / D;
    double e = 0;
    const int trials = 1500;
    for (int t = 0; t < trials; ++t) {
      const auto x = gauss(g, D);
      std::vector<uint8_t> code(cd->group_bytes());
      std::vector<float> xr(D);
      cd->encode(x.data(), D, code.data());
      cd->reconstruct(code.data(), 0, xr.data());
      double err = 0;
      for (int d = 0; d < D; ++d) err += (x[d] - xr[d]) * (x[d] - xr[d]);
      e += err / dot(x.data(), x.data(), D);
    }
    EXPECT_NEAR(e / trials, want, 0.06 * want) << cs.spec;
  }
  // The old half-bit rates are the n_outlier spelling, byte for byte.
  for (auto [a, b] : {std::pair{"turboquant_mse:bits=2.5", "turboquant_mse:bits=2,n_outlier=32,outlier_bits=3"},
                      std::pair{"turboquant_mse:bits=3.5", "turboquant_mse:bits=3,n_outlier=32"}}) {
    auto ca = codec(a), cb = codec(b);
    ASSERT_EQ(ca->group_bytes(), cb->group_bytes());
    for (int t = 0; t < 20; ++t) {
      const auto x = gauss(g, D, 4.0f);
      std::vector<uint8_t> ba(ca->group_bytes()), bb(cb->group_bytes());
      ca->encode(x.data(), D, ba.data());
      cb->encode(x.data(), D, bb.data());
      EXPECT_EQ(ba, bb) << a << " vs " << b;
    }
  }
}

// ---- RaBitQ ------------------------------------------------------------------------------------

TEST(KvPartA, RaBitQOneBitMatchesThePaper) {
  std::mt19937 g(4);
  for (const std::string rot : {"wht", "qr"}) {
    auto cd = codec("rabitq:bits=1,rot=" + rot);
    EXPECT_EQ(cd->group_bytes(), size_t(D / 8 + 4));  // d sign bits + fp16 ‖x‖ + fp16 ⟨ō, o⟩
    EXPECT_DOUBLE_EQ(cd->bits_per_element(), 1.5);
    for (int trial = 0; trial < 50; ++trial) {
      const auto x = gauss(g, D, trial % 2 ? 7.0f : 0.0f), q = gauss(g, D);
      std::vector<uint8_t> code(cd->group_bytes());
      cd->encode(x.data(), D, code.data());
      const auto y = rotated(*cd, rot == "qr" ? "dense" : "wht", x);
      const float n = l2_norm(x.data(), D);
      // x̄ = sign(o')/√d; ⟨ō, o⟩ = ‖o'‖₁/√d; decode = n/⟨ō, o⟩ · x̄ (the estimator's vector)
      double l1 = 0;
      for (int i = 0; i < D; ++i) l1 += std::fabs(double(y[i]) / n);
      const double ip = h(float(l1 / std::sqrt(double(D))));
      std::vector<float> dec(D);
      cd->decode(code.data(), 0, 1, dec.data());
      for (int i = 0; i < D; ++i)
        ASSERT_NEAR(dec[i], (y[i] > 0 ? 1 : -1) * h(n) / ip / std::sqrt(double(D)), 1e-6 * h(n)) << rot << " " << i;
      // the score: ‖x‖ · ⟨x̄, Πq⟩ / ⟨ō, o⟩
      const auto pq = rotate_ref(rot == "qr" ? "dense" : "wht", q);
      double xq = 0, mag = 0;
      for (int i = 0; i < D; ++i) xq += (y[i] > 0 ? 1 : -1) * pq[i], mag += std::fabs(pq[i]);
      std::vector<float> qd(D);
      cd->query_to_domain(q.data(), qd.data());
      EXPECT_NEAR(dot(qd.data(), dec.data(), D), h(n) * xq / std::sqrt(double(D)) / ip, 1e-5 * h(n) * mag);
    }
  }
}

// Extended RaBitQ: the code is y(t) = nearest grid point to t·o' for the t with the largest
// cos(y(t), o'), and the stored ⟨ŷ, o'⟩ is that cosine: no t of a dense sweep does better.
TEST(KvPartA, RaBitQExtendedPicksTheBestScale) {
  std::mt19937 g(5);
  for (int bits = 2; bits <= 4; ++bits) {
    auto cd = codec(fmt::format("rabitq:bits={}", bits));
    EXPECT_EQ(cd->group_bytes(), size_t(D * bits / 8 + 4));
    const double M = ((1 << bits) - 1) / 2.0;
    for (int trial = 0; trial < 10; ++trial) {
      const auto x = gauss(g, D, trial % 2 ? 6.0f : 0.0f);
      std::vector<uint8_t> code(cd->group_bytes());
      cd->encode(x.data(), D, code.data());
      const auto y = rotated(*cd, "wht", x);
      const float n = l2_norm(x.data(), D);
      std::vector<double> o(D);
      double amax = 0;
      for (int i = 0; i < D; ++i) o[i] = y[i] / n, amax = std::max(amax, std::fabs(o[i]));
      // the codec's grid vector, up to its positive factor: decode ∝ y
      std::vector<float> dec(D);
      cd->decode(code.data(), 0, 1, dec.data());
      double cyo = 0, cyy = 0;
      for (int i = 0; i < D; ++i) cyo += dec[i] * o[i], cyy += double(dec[i]) * dec[i];
      const double mine = cyo / std::sqrt(cyy);
      // the stored ⟨ŷ, o'⟩ is that cosine (fp16)
      EXPECT_NEAR(load_half(code.data() + code.size() - 2), mine, 1e-3) << "bits " << bits;
      double best = 0;
      for (int s = 1; s <= 20000; ++s) {  // t up to where every coordinate reaches the top level
        const double t = s * (M + 1) / amax / 20000 * 1.5;
        double yo = 0, yy = 0;
        for (int i = 0; i < D; ++i) {
          const double m = std::min(std::floor(t * std::fabs(o[i])) + 0.5, M) * (o[i] > 0 ? 1 : -1);
          yo += m * o[i], yy += m * m;
        }
        best = std::max(best, yo / std::sqrt(yy));
      }
      EXPECT_GE(mine, best - 1e-9) << "bits " << bits;
      EXPECT_LT(mine, best + 1e-3) << "bits " << bits;  // and the sweep finds (nearly) the same
    }
  }
}

// Thm 3.2: E[est − ⟨x, q⟩] = 0. Over many random (x, q) with a rotation-invariant joint law (so
// one fixed Π is as good as a random one) and ⟨x, q⟩ far from 0: the mean error is within
// 4 standard errors of 0, while the uncorrected ‖x‖⟨x̄, Πq⟩ (no division by ⟨ō, o⟩) is biased
// by ~20% — the test would see a missing correction.
TEST(KvPartA, RaBitQEstimatorIsUnbiased) {
  std::mt19937 g(6);
  for (int bits = 1; bits <= 4; ++bits) {
    auto cd = codec(fmt::format("rabitq:bits={}", bits));
    const int n = 20000;
    double s = 0, s2 = 0, u = 0, u2 = 0;
    std::vector<uint8_t> code(cd->group_bytes());
    std::vector<float> dec(D), qd(D);
    for (int i = 0; i < n; ++i) {
      const auto x = gauss(g, D), w = gauss(g, D);
      std::vector<float> q(D);
      const float xn = l2_norm(x.data(), D);
      for (int d = 0; d < D; ++d) q[d] = 0.5f * x[d] / xn + 0.5f * w[d] / 8.0f;
      cd->encode(x.data(), D, code.data());
      cd->decode(code.data(), 0, 1, dec.data());
      cd->query_to_domain(q.data(), qd.data());
      const double exact = dot(q.data(), x.data(), D), est = dot(qd.data(), dec.data(), D);
      const double ip = load_half(code.data() + code.size() - 2);  // ⟨ŷ, o'⟩
      const double e = est - exact, eu = est * ip - exact;
      s += e, s2 += e * e, u += eu, u2 += eu * eu;
    }
    const double mean = s / n, se = std::sqrt((s2 / n - mean * mean) / n);
    const double mu = u / n, seu = std::sqrt((u2 / n - mu * mu) / n);
    EXPECT_LT(std::fabs(mean), 4 * se) << "bits " << bits << ": mean error " << mean << " ± " << se;
    EXPECT_GT(std::fabs(mu), 10 * seu) << "bits " << bits << ": the uncorrected estimate looks unbiased too";
  }
}

// ---- bytes per token of VeloxQuant-MLX's pairing, and bad options --------------------------------

TEST(KvPartA, RaBitQKeysWithTurboQuant4ValuesBytesPerToken) {
  KVShape s;  // SmolLM2-135M: 30 layers, 3 kv heads of 64
  s.n_layers = 30, s.n_heads = 9, s.n_kv_heads = 3, s.head_dim = 64, s.max_ctx = 512, s.scale = 0.125f;
  const KVConfig cfg =
      uniform_kv_config(30, parse_kv_spec("rabitq:bits=1", "k"), parse_kv_spec("turboquant_mse:bits=4", "v"));
  auto c = make_kv_cache(cfg, s);
  // keys 8 + 4 bytes, values 32 + 2 bytes, per kv head and layer
  EXPECT_DOUBLE_EQ(c->bytes_per_token(), (12.0 + 34.0) * 3 * 30);
  auto f16 = make_kv_cache("f16", s);
  EXPECT_LE(c->bytes_per_token(), f16->bytes_per_token() / 4);
  const KVConfig v2 = uniform_kv_config(30, parse_kv_spec("affine:bits=3,rot=qr,qjl=1", "k"),
                                        parse_kv_spec("affine:bits=3,rot=qr", "v"));
  EXPECT_DOUBLE_EQ(make_kv_cache(v2, s)->bytes_per_token(), (42.0 + 32.0) * 3 * 30);
}

TEST(KvPartA, BadOptionsAreUserErrors) {
  for (const char* s : {"affine:rot=fft", "affine:qjl=1", "affine:rot=qr,qjl=2", "kivi:rot=qr",
                        "turboquant_mse:bits=2.3", "turboquant_mse:bits=4.5", "turboquant_mse:bits=0.5",
                        "turboquant_mse:bits=2.5,n_outlier=8", "turboquant_mse:outlier_bits=4",
                        "turboquant_mse:bits=2,n_outlier=65", "turboquant_mse:bits=2,n_outlier=8,outlier_bits=5",
                        "turboquant_mse:bits=2,n_outlier=1.5", "rabitq:bits=5", "rabitq:rot=none", "rabitq:group=32"})
    EXPECT_THROW(codec(s), UserError) << s;
}

// ---- --kv-stats -----------------------------------------------------------------------------------

TEST(KvPartA, StatsMatchReconstructions) {
  KVShape s;
  s.n_layers = 2, s.n_heads = 4, s.n_kv_heads = 2, s.head_dim = D, s.scale = 0.125f;
  const int n = 50;
  s.max_ctx = n;
  const std::string ks = "turboquant_mse:bits=2", vs = "affine:bits=3";
  KVConfig cfg = uniform_kv_config(2, parse_kv_spec(ks, "k"), parse_kv_spec(vs, "v"));
  cfg.mode = KVMode::Decode;
  cfg.residual = 4;  // the newest 4 at full precision: not counted in the vectors, exact in the scores
  cfg.stats = std::make_shared<KVStats>(2);
  std::mt19937 g(7);
  std::vector<float> K[2], V[2], Q[2], out(size_t(n) * 4 * D);
  auto cache = make_kv_cache(cfg, s);
  for (int l = 0; l < 2; ++l) {
    K[l] = gauss(g, n * 2 * D), V[l] = gauss(g, n * 2 * D), Q[l] = gauss(g, n * 4 * D);
    for (size_t i = 0; i < K[l].size(); i += D) K[l][i + 5] += 4.0f * (l + 1);
    for (auto [p0, nb] : {std::pair{0, 30}, std::pair{30, 20}}) {
      cache->append(l, K[l].data() + size_t(p0) * 2 * D, V[l].data() + size_t(p0) * 2 * D, nb, p0);
      cache->attend(l, Q[l].data() + size_t(p0) * 4 * D, nb, p0, out.data() + size_t(p0) * 4 * D);
    }
  }
  auto ck = codec(ks, Side::Key), cv = codec(vs, Side::Value);
  for (int l = 0; l < 2; ++l) {
    // reconstruction: every position that left the window (n − 4 per head), fp16-rounded input
    double cs[2] = {0, 0}, e2[2] = {0, 0}, n2[2] = {0, 0};
    std::vector<float> kh[2];  // reconstructed keys per head
    for (int side = 0; side < 2; ++side)
      for (int hd = 0; hd < 2; ++hd)
        for (int p = 0; p < n; ++p) {
          const Codec& cd = side == 0 ? *ck : *cv;
          std::vector<float> x(D), xr(D);
          for (int d = 0; d < D; ++d) x[d] = h((side == 0 ? K : V)[l][(size_t(p) * 2 + hd) * D + d]);
          std::vector<uint8_t> code(cd.group_bytes());
          cd.encode(x.data(), D, code.data());
          cd.reconstruct(code.data(), 0, xr.data());
          if (side == 0) kh[hd].insert(kh[hd].end(), xr.begin(), xr.end());
          if (p >= n - 4) continue;
          double e = 0, a = 0, b = 0, c = 0;
          for (int d = 0; d < D; ++d)
            e += (x[d] - xr[d]) * (x[d] - xr[d]), a += x[d] * x[d], b += xr[d] * xr[d], c += x[d] * xr[d];
          cs[side] += c / std::sqrt(a * b), e2[side] += e, n2[side] += a;
        }
    // scores: decode mode, query at p sees keys < max(0, p + 1 − 4) from the codes
    double se = 0, sr = 0, tv = 0;
    int64_t pairs = 0;
    for (int p = 0; p < n; ++p)
      for (int qh = 0; qh < 4; ++qh) {
        const int hd = qh / 2, bk = std::max(0, p + 1 - 4);
        const float* q = Q[l].data() + (size_t(p) * 4 + qh) * D;
        std::vector<double> ex(p + 1), es(p + 1);
        for (int j = 0; j <= p; ++j) {
          std::vector<float> k(D);
          for (int d = 0; d < D; ++d) k[d] = h(K[l][(size_t(j) * 2 + hd) * D + d]);
          ex[j] = dot(q, k.data(), D);
          es[j] = j < bk ? dot(q, kh[hd].data() + size_t(j) * D, D) : ex[j];
          if (j < bk) se += (es[j] - ex[j]) * (es[j] - ex[j]), sr += ex[j] * ex[j], ++pairs;
        }
        const double me = *std::max_element(ex.begin(), ex.end()), ms = *std::max_element(es.begin(), es.end());
        double ze = 0, zs = 0;
        for (int j = 0; j <= p; ++j) ze += std::exp((ex[j] - me) * 0.125), zs += std::exp((es[j] - ms) * 0.125);
        double t = 0;
        for (int j = 0; j <= p; ++j)
          t += std::fabs(std::exp((ex[j] - me) * 0.125) / ze - std::exp((es[j] - ms) * 0.125) / zs);
        tv += 0.5 * t;
      }
    const KVLayerStats st = cfg.stats->layer(l);
    const int64_t vecs = 2 * (n - 4);
    ASSERT_EQ(st.vectors[0], vecs);
    ASSERT_EQ(st.vectors[1], vecs);
    for (int side = 0; side < 2; ++side) {
      EXPECT_NEAR(st.cos_sum[side] / vecs, cs[side] / vecs, 1e-5) << "layer " << l << " side " << side;
      EXPECT_NEAR(st.err2[side] / st.norm2[side], e2[side] / n2[side], 1e-5) << "layer " << l << " side " << side;
    }
    EXPECT_EQ(st.scores, pairs);
    EXPECT_EQ(st.queries, int64_t(n) * 4);
    EXPECT_NEAR(std::sqrt(st.score_err2 / st.score_ref2), std::sqrt(se / sr), 1e-4 * std::sqrt(se / sr));
    EXPECT_NEAR(st.tv_sum / st.queries, tv / (n * 4), 1e-5);
    EXPECT_GT(tv, 0);  // quantized keys move the attention
  }
  const auto j = cfg.stats->to_json();
  EXPECT_EQ(j["layers"].size(), 2u);
  EXPECT_NEAR(j["all"]["k_cos"].get<double>(),
              (cfg.stats->layer(0).cos_sum[0] + cfg.stats->layer(1).cos_sum[0]) / (4.0 * (n - 4)), 1e-12);
}

TEST(KvPartA, CliKvStatsTableAndJson) {
  QT_REQUIRE_FILE(test::model_gguf());
  const std::string dir = test::temp_dir("kv-stats");
  const std::string base = test::quanttool_bin() + " eval-ppl --model " + test::model_gguf() + " --text " +
                           test::data_file("wikitext-2/wiki.test.raw") +
                           " --chunks 1 --ctx 128 --threads 2 --kv-mode decode";
  std::string out;
  ASSERT_EQ(test::run_cmd(
                base + " --kv-k rabitq:bits=1 --kv-v turboquant_mse:bits=4 --kv-stats --json " + dir + "/s.json", &out),
            0)
      << out;
  EXPECT_NE(out.find("kv stats"), std::string::npos) << out;
  std::ifstream f(dir + "/s.json");
  const auto j = nlohmann::json::parse(f);
  ASSERT_EQ(j["kv_stats"]["layers"].size(), 30u);
  for (auto& l : j["kv_stats"]["layers"]) {
    EXPECT_EQ(l["k_vectors"].get<int64_t>(), 3 * 128);  // every position of every kv head, r = 0
    EXPECT_GT(l["k_cos"].get<double>(), 0.5);
    EXPECT_LT(l["k_cos"].get<double>(), 1.0);
    EXPECT_GT(l["v_cos"].get<double>(), 0.9);  // 4-bit values
    EXPECT_GT(l["attn_tv"].get<double>(), 0.0);
  }
  // a full-precision cache has nothing to compare: one line, exit 2
  EXPECT_EQ(test::run_cmd(base + " --kv f16 --kv-stats", &out), 2) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(test::run_cmd(base + " --kv-k turboquant_mse:bits=2.3", &out), 2) << out;
  EXPECT_NE(out.find("multiple of 1/64"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qt
