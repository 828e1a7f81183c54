// CommVQ (arXiv 2506.18879; libquant/kv/codec_commvq.cpp): the projection of the calibrated
// codebooks commutes with RoPE, calibration is byte-identical per seed, the codec matches a scalar
// reference written here, and the cache's attention matches softmax over the reference keys. On
// the synthetic model of kv_synthetic.h.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "calib/kv_codebook.h"
#include "formats/error.h"
#include "libquant/kv/artifacts.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/calibrated.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/codecs.h"
#include "tests/kv_synthetic.h"
#include "tests/support.h"

namespace qt {
namespace {

using namespace qt::kv;
using namespace qt::kv_synthetic;

// ---- CommVQ ------------------------------------------------------------------------------------

// RoPE of the synthetic head (rotate-half pairs (i, i + 8), θ = 10000).
std::vector<float> synthetic_inv_freq() {
  std::vector<float> f(kD / 2);
  for (int i = 0; i < kD / 2; ++i) f[size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / float(kD));
  return f;
}

calib::KvSamples synthetic_rope(int64_t n, uint32_t seed) {
  calib::KvSamples s = synthetic(n, seed);
  s.ctx = 256;
  s.rope_inv_freq = synthetic_inv_freq();
  return s;
}

// R(m)ᵀ x (inverse) or R(m) x in double, the angle float(m)·θ_i rounded as the model rounds it.
std::vector<double> rope_ref(const std::vector<double>& x, int64_t m, bool inverse) {
  const std::vector<float> f = synthetic_inv_freq();
  std::vector<double> y(kD);
  for (int i = 0; i < kD / 2; ++i) {
    const double a = double(float(m) * f[size_t(i)]), c = std::cos(a), s = inverse ? -std::sin(a) : std::sin(a);
    y[size_t(i)] = x[size_t(i)] * c - x[size_t(i + kD / 2)] * s;
    y[size_t(i + kD / 2)] = x[size_t(i + kD / 2)] * c + x[size_t(i)] * s;
  }
  return y;
}

// The projection makes codeword 2g+1 = J·codeword 2g in every RoPE plane, and the commutation the
// paper's trick rests on holds to fp32 rounding: rotating a projected codeword equals the
// codeword-form (2×2 block) product, R(m)·(M u) = M·(R(m) u) with M = [[x, −y], [y, x]], and the
// twin's rotation is the rotated codeword turned by J.
TEST(CommVQ, ProjectionIsRoPECommuting) {
  std::mt19937 g(3);
  std::normal_distribution<float> nd;
  const int k = 16, d = kD, h = d / 2;
  std::vector<float> C(size_t(k) * d);
  for (float& x : C) x = 3.0f * nd(g);
  std::vector<int64_t> cnt(k);
  for (int j = 0; j < k; ++j) cnt[size_t(j)] = j % 5;  // some zero, pairs (0, 0) included? j=0,1: 0,1
  cnt[10] = cnt[11] = 0;                               // both empty: equal weights
  const std::vector<float> before = C;
  calib::commvq_project(C.data(), cnt.data(), k, d);
  for (int gi = 0; gi < k; gi += 2)
    for (int i = 0; i < h; ++i) {
      const float* c0 = C.data() + size_t(gi) * d;
      const float* c1 = c0 + d;
      EXPECT_EQ(c1[i], -c0[i + h]);
      EXPECT_EQ(c1[i + h], c0[i]);
      // the weighted least-squares solution: u = (w0 c0 + w1 Jᵀ c1) / (w0 + w1)
      double w0 = double(cnt[size_t(gi)]), w1 = double(cnt[size_t(gi + 1)]);
      if (w0 + w1 == 0) w0 = w1 = 1;
      const float* b0 = before.data() + size_t(gi) * d;
      const float* b1 = b0 + d;
      EXPECT_NEAR(c0[i], (w0 * b0[i] + w1 * b1[i + h]) / (w0 + w1), 1e-5);
      EXPECT_NEAR(c0[i + h], (w0 * b0[i + h] - w1 * b1[i]) / (w0 + w1), 1e-5);
    }
  // idempotent: an already commuting codebook is left as it is
  std::vector<float> again = C;
  calib::commvq_project(again.data(), cnt.data(), k, d);
  for (size_t i = 0; i < C.size(); ++i) EXPECT_NEAR(again[i], C[i], 1e-6f * (1 + std::abs(C[i])));
  const auto rope = RopeAngles::make(synthetic_inv_freq(), 5000);
  float rel_max = 0;
  for (int m : {0, 1, 7, 100, 511, 4999})
    for (int gi = 0; gi < k; gi += 2) {
      const float* c0 = C.data() + size_t(gi) * d;
      const float* c1 = c0 + d;
      float r0[kD], r1[kD];
      rope->rotate(c0, m, r0);
      rope->rotate(c1, m, r1);
      for (int i = 0; i < h; ++i) {
        const float cs = rope->cos[size_t(m) * h + i], sn = rope->sin[size_t(m) * h + i];
        const float x = c0[i], y = c0[i + h];  // M = [[x, −y], [y, x]]: M e₁ = c0's plane, M e₂ = c1's
        // M·(R e₁) = M (cs, sn) and M·(R e₂) = M (−sn, cs): the codeword-form products
        const float m0a = x * cs - y * sn, m0b = y * cs + x * sn;
        const float m1a = x * -sn - y * cs, m1b = y * -sn + x * cs;
        const float scale = std::abs(x) + std::abs(y) + 1e-30f;
        for (float e : {r0[i] - m0a, r0[i + h] - m0b, r1[i] - m1a, r1[i + h] - m1b})
          rel_max = std::max(rel_max, std::abs(e) / scale);
        EXPECT_NEAR(r1[i], -r0[i + h], 4e-7f * scale);  // R(m)·(J u) = J·(R(m) u)
        EXPECT_NEAR(r1[i + h], r0[i], 4e-7f * scale);
      }
    }
  EXPECT_LT(rel_max, 4e-7f);  // a few fp32 roundings (2⁻²⁴ ≈ 6e−8 each)
}

// A folder with commvq:bits=1,cb=4 (4 stages of 16 codewords at d = 16) and its unprojected twin.
const std::string& commvq_dir() {
  static const std::string dir = [] {
    const std::string d = test::temp_dir("kvvq-commvq");
    const calib::KvSamples s = synthetic_rope(2048, 5);
    for (const char* m : {"commvq:bits=1,cb=4", "commvq:bits=1,cb=4,comm=0"}) {
      const KVSpec spec = parse_kv_spec(m, "test");
      calib::write_calibrated_artifacts(d,
                                        calibrated_prefix(commvq_table_method(4, spec.number("comm", 1, "t") != 0), 1),
                                        calib::train_kv_codebooks(s, spec, 42, 1, nullptr, {}), kD, 42, {});
    }
    return d;
  }();
  return dir;
}

TEST(CommVQ, CalibrationDeterministicPerSeedAndCommuting) {
  const calib::KvSamples s = synthetic_rope(1024, 9);
  const KVSpec spec = parse_kv_spec("commvq:bits=1,cb=4", "t");
  const int t0 = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto a = calib::train_kv_codebooks(s, spec, 7, 1, nullptr, {});
  omp_set_num_threads(2);
  const auto b = calib::train_kv_codebooks(s, spec, 7, 1, nullptr, {});
  const auto c = calib::train_kv_codebooks(s, spec, 8, 1, nullptr, {});
  omp_set_num_threads(t0);
  ASSERT_EQ(a.size(), size_t(2 * kLayers * kHeads));  // present + codebooks per layer and head
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    ASSERT_EQ(a[i].second.size(), b[i].second.size());
    EXPECT_EQ(0, std::memcmp(a[i].second.data(), b[i].second.data(), a[i].second.size() * 4)) << a[i].first;
    differs |= a[i].second != c[i].second;
    if (a[i].first.find("codebooks") == std::string::npos) continue;
    ASSERT_EQ(a[i].second.size(), size_t(4 * 16 * kD));
    for (int gi = 0; gi < 4 * 16; gi += 2)  // every stage's pairs: codeword 2g+1 = J·codeword 2g
      for (int j = 0; j < kD / 2; ++j) {
        const float* c0 = a[i].second.data() + size_t(gi) * kD;
        EXPECT_EQ(c0[kD + j], -c0[j + kD / 2]);
        EXPECT_EQ(c0[kD + j + kD / 2], c0[j]);
      }
  }
  EXPECT_TRUE(differs);  // the seed is used
  EXPECT_THROW(calib::train_kv_codebooks(s, parse_kv_spec("commvq:bits=1,cb=3", "t"), 1, 1, nullptr, {}), UserError);
  EXPECT_THROW(calib::train_kv_codebooks(s, parse_kv_spec("commvq:bits=0.3,cb=4", "t"), 1, 1, nullptr, {}), UserError);
  EXPECT_THROW(calib::train_kv_codebooks(s, parse_kv_spec("commvq:bits=1,cb=4", "t"), 1, 3, nullptr, {}),
               UserError);  // values
  calib::KvSamples norope = s;
  norope.rope_inv_freq.clear();
  EXPECT_THROW(calib::train_kv_codebooks(norope, spec, 1, 1, nullptr, {}), UserError);
}

// The reference: the pre-RoPE key R(m)ᵀ x in double, greedy residual nearest codewords (exact
// squared distances), the sum of the chosen codewords rotated back by R(m).
struct CommVQRef {
  std::vector<float> C;  // n × 16 × d
  int n = 4, k = 16;
  std::vector<double> encode_decode(const float* x, int64_t m, std::vector<int>* codes) const {
    std::vector<double> xd(x, x + kD);
    std::vector<double> r = rope_ref(xd, m, true), sum(kD, 0.0);
    for (int s = 0; s < n; ++s) {
      int best = 0;
      double bd = 1e300;
      for (int c = 0; c < k; ++c) {
        double dd = 0;
        for (int i = 0; i < kD; ++i) dd += std::pow(r[size_t(i)] - C[(size_t(s) * k + c) * kD + i], 2);
        if (dd < bd) bd = dd, best = c;
      }
      codes->push_back(best);
      for (int i = 0; i < kD; ++i) {
        r[size_t(i)] -= C[(size_t(s) * k + best) * kD + i];
        sum[size_t(i)] += C[(size_t(s) * k + best) * kD + i];
      }
    }
    return rope_ref(sum, m, false);
  }
};

TEST(CommVQ, EncodeDecodeScoreMatchScalarReference) {
  std::mt19937 g(23);
  std::normal_distribution<float> nd;
  for (int comm : {1, 0})
    for (int layer = 0; layer < kLayers; ++layer) {
      KVContext c;
      c.head_dim = kD, c.seed = 42, c.layer = layer;
      c.artifacts = Artifacts::load(commvq_dir(), kD, 42);
      c.rope = RopeAngles::make(synthetic_inv_freq(), 1000);
      const std::string spec = comm ? "commvq:bits=1,cb=4" : "commvq:bits=1,cb=4,comm=0";
      auto codec = make_codec(parse_kv_spec(spec, "t"), Side::Key, c);
      EXPECT_EQ(codec->group_bytes(), 2u);  // 4 codes of 4 bits: 1 bit per element at d = 16
      EXPECT_EQ(codec->bits_per_element(), 1.0);
      EXPECT_THROW(make_codec(parse_kv_spec(spec, "t"), Side::Value, c), UserError);
      for (int h = 0; h < kHeads; ++h) {
        const Codec& ch = codec->for_head(h);
        CommVQRef ref;
        ref.C = *c.artifacts->find(
            calibrated_name(calibrated_prefix(commvq_table_method(4, comm), 1), layer, Side::Key, h, "codebooks"));
        std::vector<uint8_t> codes(size_t(1000) * 2, 0);
        int code_diff = 0;
        for (int64_t m : {0, 1, 2, 31, 32, 300, 999}) {
          float x[kD];
          draw(g, true, layer, h, x);
          ch.encode_at(x, kD, m, codes.data() + m * 2);
          std::vector<int> rc;
          const std::vector<double> want = ref.encode_decode(x, m, &rc);
          for (int s = 0; s < 4; ++s) code_diff += int(get_bits(codes.data() + m * 2, s, 4)) != rc[size_t(s)];
          float got[kD];
          ch.decode(codes.data(), m, 1, got);  // decode at position m: post-RoPE head space
          for (int i = 0; i < kD; ++i)
            EXPECT_NEAR(got[i], want[size_t(i)], 2e-5 * (1 + std::abs(want[size_t(i)]))) << m << " " << i;
          float q[kD], qd[kD];
          double sref = 0, sgot = 0;
          for (int i = 0; i < kD; ++i) q[i] = nd(g);
          ch.query_to_domain(q, qd);
          for (int i = 0; i < kD; ++i) sref += double(q[i]) * want[size_t(i)], sgot += double(qd[i]) * got[i];
          EXPECT_NEAR(sgot, sref, 1e-4 * (1 + std::abs(sref)));
        }
        EXPECT_EQ(code_diff, 0);
      }
    }
}

// Through the cache: commvq keys (positions from the cache: encode_at and decode at the stored
// positions), fp32 values, decode mode, no window, against softmax over the reference keys.
TEST(CommVQ, CacheAttentionMatchesReference) {
  auto cache = decode_cache("commvq:bits=1,cb=4", "f32", commvq_dir(), 200, synthetic_inv_freq());
  std::mt19937 g(45);
  const int n = 180, HD = kHeads * kD, QD = 4 * kD;
  for (int layer = 0; layer < kLayers; ++layer) {
    std::vector<float> k, v, q, out(size_t(n) * QD);
    draw_layer(g, layer, n, k, v, q);
    cache->append(layer, k.data(), v.data(), 100, 0);  // two batches: positions continue
    cache->append(layer, k.data() + size_t(100) * HD, v.data() + size_t(100) * HD, n - 100, 100);
    cache->attend(layer, q.data(), n, 0, out.data());
    KVContext c;
    c.artifacts = Artifacts::load(commvq_dir(), kD, 42);
    c.layer = layer;
    for (int h = 0; h < kHeads; ++h) {
      CommVQRef ref;
      ref.C = *c.artifacts->find(calibrated_name(calibrated_prefix("commvq_c4", 1), layer, Side::Key, h, "codebooks"));
      std::vector<std::vector<double>> kh(n);
      for (int t = 0; t < n; ++t) {
        float kx[kD];
        for (int i = 0; i < kD; ++i) kx[i] = round_half(k[size_t(t) * HD + h * kD + i]);
        std::vector<int> rc;
        kh[size_t(t)] = ref.encode_decode(kx, t, &rc);
      }
      for (int t = 0; t < n; t += 7)
        for (int qh = h * 2; qh < h * 2 + 2; ++qh) {
          const auto o = ref_attend(q.data() + size_t(t) * QD + qh * kD, kh, t,
                                    [&](int j, int i) { return double(v[size_t(j) * HD + h * kD + i]); });
          for (int i = 0; i < kD; ++i)
            EXPECT_NEAR(out[size_t(t) * QD + qh * kD + i], o[size_t(i)], 2e-3 * (1 + std::abs(o[size_t(i)])))
                << "layer " << layer << " pos " << t << " head " << qh;
        }
    }
  }
}

}  // namespace
}  // namespace qt
