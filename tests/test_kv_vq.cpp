// Calibrated KV methods: k-means against a numpy golden, the empirical
// Lloyd-Max, codebook calibration byte-identical per seed, VecInfer and SpectralQuant codecs
// against scalar references written here, and the quantized cache scoring them (lookup tables,
// per-head tables) against attention computed from those references (CommVQ: test_kv_commvq.cpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "calib/kmeans.h"
#include "calib/kv_codebook.h"
#include "calib/lloyd_max_empirical.h"
#include "formats/error.h"
#include "formats/safetensors.h"
#include "formats/tensor.h"
#include "libquant/kv/artifacts.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/calibrated.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/codecs.h"
#include "libquant/kv/vq_search.h"
#include "tests/kv_synthetic.h"
#include "tests/support.h"

namespace qt {
namespace {

using namespace qt::kv;
using namespace qt::kv_synthetic;

// ---- k-means -------------------------------------------------------------------------------

// tests/golden/make_kmeans_golden.py: the same algorithm in numpy, same seed and init. Assignments
// and iteration counts must agree exactly, centroids to float rounding.
TEST(KMeans, MatchesNumpyGolden) {
  const std::string path = test::source_dir() + "/tests/golden/kv_vq/kmeans.safetensors";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  SafetensorsFile f = SafetensorsFile::open(path);
  for (const char* c : {"c4", "c8", "dup"}) {
    const std::string n = c;
    const std::vector<float> x = to_f32(f.get(n + ".x")), cen = to_f32(f.get(n + ".centroids")),
                             as = to_f32(f.get(n + ".assign")), info = to_f32(f.get(n + ".info"));
    const int64_t N = int64_t(info[0]);
    const int dim = int(info[1]), k = int(info[2]);
    const calib::KMeansResult r = calib::kmeans(x.data(), N, dim, k, uint64_t(info[3]), int(info[4]));
    EXPECT_EQ(r.iterations, int(info[5])) << n;
    ASSERT_EQ(r.centroids.size(), cen.size()) << n;
    for (size_t i = 0; i < cen.size(); ++i)
      EXPECT_NEAR(r.centroids[i], cen[i], 1e-6f * (1 + std::abs(cen[i]))) << n << " " << i;
    int diff = 0;
    for (int64_t i = 0; i < N; ++i) diff += r.assign[size_t(i)] != int(as[size_t(i)]);
    EXPECT_EQ(diff, 0) << n;
    EXPECT_NEAR(r.inertia, double(info[6]), 1e-4 * (1 + double(info[6]))) << n;
  }
}

TEST(KMeans, SameBytesAtAnyThreadCountAndSeedMatters) {
  std::mt19937 g(5);
  std::normal_distribution<float> nd;
  std::vector<float> x(20000 * 4);
  for (float& v : x) v = nd(g);
  const int t0 = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto a = calib::kmeans(x.data(), 20000, 4, 64, 9);
  omp_set_num_threads(2);
  const auto b = calib::kmeans(x.data(), 20000, 4, 64, 9);
  const auto c = calib::kmeans(x.data(), 20000, 4, 64, 10);
  omp_set_num_threads(t0);
  EXPECT_EQ(0, std::memcmp(a.centroids.data(), b.centroids.data(), a.centroids.size() * 4));
  EXPECT_NE(0, std::memcmp(a.centroids.data(), c.centroids.data(), a.centroids.size() * 4));
  // k-means improves on its own start: 64 centres in 4-d Gaussian data give well under the
  // variance (4 per point)
  EXPECT_LT(a.inertia / 20000, 0.9);
}

// ---- empirical Lloyd-Max ---------------------------------------------------------------------

TEST(LloydMaxEmpirical, GaussianSamplesGiveMaxTable) {
  std::mt19937 g(11);
  std::normal_distribution<double> nd;
  std::vector<float> x(400000);
  for (float& v : x) v = float(nd(g));
  const double pub[] = {0, 0.3634, 0.1175, 0.03454};  // Max (1960)
  for (int b = 1; b <= 3; ++b) {
    const Codebook cb = calib::lloyd_max_empirical(x, 1 << b);
    EXPECT_NEAR(cb.mse, pub[b], 0.02 * pub[b]) << b;
    // the centroid condition on the samples themselves
    std::vector<double> s(size_t(1) << b, 0.0);
    std::vector<int64_t> n(size_t(1) << b, 0);
    std::vector<float> t(cb.thresholds.begin(), cb.thresholds.end());
    for (float v : x) {
      const int i = codebook_index(t.data(), int(t.size()), v);
      s[size_t(i)] += v, ++n[size_t(i)];
    }
    for (int i = 0; i < (1 << b); ++i)
      EXPECT_NEAR(cb.centroids[size_t(i)], s[size_t(i)] / double(n[size_t(i)]), 2e-4) << b;
  }
  // 2 bits: ±0.4528, ±1.510 (Max)
  const Codebook cb = calib::lloyd_max_empirical(x, 4);
  EXPECT_NEAR(cb.centroids[3], 1.510, 0.01);
  EXPECT_NEAR(cb.centroids[2], 0.4528, 0.01);
}

// ---- calibration on synthetic keys and values -------------------------------------------------

// A folder with vecinfer:bits=1, vecinfer:bits=2 and spectral:bits=3 tables for the synthetic model.
std::string calibrated_dir(uint64_t seed) {
  const std::string dir = test::temp_dir("kvvq");
  const calib::KvSamples s = synthetic(2048, 1);
  for (const char* m : {"vecinfer:bits=1", "vecinfer:bits=2", "spectral:bits=3"}) {
    const KVSpec spec = parse_kv_spec(m, "test");
    const auto t = calib::train_kv_codebooks(s, spec, seed, 3, nullptr, {});
    calib::write_calibrated_artifacts(dir, calibrated_prefix(spec.method, spec.number("bits", 0, "test")), t, kD, seed,
                                      {});
  }
  return dir;
}

const std::string& shared_dir() {
  static const std::string d = calibrated_dir(42);
  return d;
}

KVContext ctx_for(int layer) {
  KVContext c;
  c.head_dim = kD;
  c.seed = 42;
  c.layer = layer;
  c.artifacts = Artifacts::load(shared_dir(), kD, 42);
  return c;
}

const std::vector<float>& table(const KVContext& c, const std::string& prefix, Side side, int h, const std::string& t) {
  const auto* p = c.artifacts->find(calibrated_name(prefix, c.layer, side, h, t));
  if (!p) throw std::runtime_error("missing " + t);
  return *p;
}

TEST(KvCodebookCalibration, ByteIdenticalPerSeedAtAnyThreadCount) {
  const calib::KvSamples s = synthetic(1024, 3);
  auto run = [&](uint64_t seed, int threads) {
    omp_set_num_threads(threads);
    const std::string dir = test::temp_dir("kvvq-det");
    for (const char* m : {"vecinfer:bits=2", "spectral:bits=3"}) {
      const KVSpec spec = parse_kv_spec(m, "test");
      calib::write_calibrated_artifacts(dir, calibrated_prefix(spec.method, spec.number("bits", 0, "t")),
                                        calib::train_kv_codebooks(s, spec, seed, 3, nullptr, {}), kD, seed, {});
    }
    return dir;
  };
  const int t0 = omp_get_max_threads();
  const std::string a = run(7, 1), b = run(7, 2), c = run(8, 2);
  omp_set_num_threads(t0);
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  for (const char* f : {"vecinfer_b2.safetensors", "spectral_b3.safetensors"}) {
    EXPECT_EQ(bytes(a + "/" + f), bytes(b + "/" + f)) << f;
    EXPECT_GT(bytes(a + "/" + f).size(), 1000u);
  }
  EXPECT_NE(bytes(a + "/vecinfer_b2.safetensors"), bytes(c + "/vecinfer_b2.safetensors"));  // the seed is used
  EXPECT_NE(bytes(a + "/manifest.json"), bytes(c + "/manifest.json"));
}

TEST(KvCodebookCalibration, MissingTablesAreUserErrors) {
  KVContext c;
  c.head_dim = kD;
  EXPECT_THROW(make_codec(parse_kv_spec("vecinfer:bits=2", "t"), Side::Key, c), UserError);  // no artifacts
  KVContext l9 = ctx_for(0);
  l9.layer = 9;  // not calibrated
  EXPECT_THROW(make_codec(parse_kv_spec("spectral:bits=3", "t"), Side::Key, l9), UserError);
  KVContext c0 = ctx_for(0);  // bits not calibrated
  EXPECT_THROW(make_codec(parse_kv_spec("spectral:bits=2", "t"), Side::Key, c0), UserError);
  EXPECT_THROW(make_codec(parse_kv_spec("vecinfer:bits=3", "t"), Side::Key, c0), UserError);  // no such variant
  const calib::KvSamples s = synthetic(300, 1);
  EXPECT_THROW(calib::train_kv_codebooks(s, parse_kv_spec("turboquant_mse:bits=3", "t"), 1, 3, nullptr, {}), UserError);
  const calib::KvSamples few = synthetic(200, 1);  // fewer vectors than 256 centroids
  EXPECT_THROW(calib::train_kv_codebooks(few, parse_kv_spec("vecinfer:bits=2", "t"), 1, 3, nullptr, {}), UserError);
  EXPECT_THROW(calib::train_kv_codebooks(s, parse_kv_spec("spectral:bits=3,rot=qr", "t"), 1, 3, nullptr, {}),
               UserError);
}

// ---- scalar references -------------------------------------------------------------------------

// Orthonormal Sylvester Hadamard matrix, H[i][j] = (−1)^popcount(i & j) / √d (not the codec's FWHT).
double hadamard(int i, int j) { return (__builtin_popcount(unsigned(i & j)) & 1 ? -1.0 : 1.0) / std::sqrt(double(kD)); }

struct VecInferRef {
  int v, m;
  std::vector<float> lambda, cb;  // cb: m × 256 × v
  bool key;
  // the transformed vector k̃ = H (k / λ)
  std::vector<double> transform(const float* x) const {
    std::vector<double> y(kD, 0.0);
    for (int i = 0; i < kD; ++i)
      for (int j = 0; j < kD; ++j)
        y[size_t(i)] += key ? hadamard(i, j) * double(x[j]) / lambda[size_t(j)] : (i == j) * double(x[j]);
    return y;
  }
  double dist(const std::vector<double>& y, int s, int c) const {
    double d = 0;
    for (int i = 0; i < v; ++i) d += std::pow(y[size_t(s * v + i)] - cb[(size_t(s) * 256 + c) * v + i], 2);
    return d;
  }
  // the head-space vector of codes: λ ⊙ Hᵀ ŷ (keys), ŷ (values)
  std::vector<double> head(const uint8_t* codes) const {
    std::vector<double> y(kD), x(kD, 0.0);
    for (int s = 0; s < m; ++s)
      for (int i = 0; i < v; ++i) y[size_t(s * v + i)] = cb[(size_t(s) * 256 + codes[s]) * v + i];
    if (!key) return y;
    for (int j = 0; j < kD; ++j) {
      for (int i = 0; i < kD; ++i) x[size_t(j)] += hadamard(i, j) * y[size_t(i)];
      x[size_t(j)] *= lambda[size_t(j)];
    }
    return x;
  }
};

VecInferRef vecinfer_ref(const KVContext& c, int bits, Side side, int h) {
  VecInferRef r;
  r.v = 8 / bits, r.m = kD / r.v, r.key = side == Side::Key;
  const std::string p = calibrated_prefix("vecinfer", bits);
  if (r.key) r.lambda = table(c, p, side, h, "lambda");
  r.cb = table(c, p, side, h, "codebooks");
  return r;
}

TEST(VecInfer, EncodeDecodeScoreMatchScalarReference) {
  std::mt19937 g(21);
  std::normal_distribution<float> nd;
  for (int layer = 0; layer < kLayers; ++layer)
    for (int bits : {1, 2})
      for (Side side : {Side::Key, Side::Value}) {
        const KVContext c = ctx_for(layer);
        const auto codec = make_codec(parse_kv_spec(fmt::format("vecinfer:bits={}", bits), "t"), side, c);
        EXPECT_EQ(codec->bits_per_element(), double(bits));  // no side data: exactly c/v bits
        for (int h = 0; h < kHeads; ++h) {
          const Codec& ch = codec->for_head(h);
          const VecInferRef ref = vecinfer_ref(c, bits, side, h);
          int mismatched = 0, total = 0;
          for (int t = 0; t < 60; ++t) {
            float x[kD], q[kD];
            draw(g, side == Side::Key, layer, h, x);
            for (float& e : q) e = nd(g);
            std::vector<uint8_t> code(ch.group_bytes());
            ch.encode(x, kD, code.data());
            // the nearest centroid per sub-space (ties and expansion rounding aside)
            const auto y = ref.transform(x);
            for (int s = 0; s < ref.m; ++s) {
              int best = 0;
              for (int k = 1; k < 256; ++k)
                if (ref.dist(y, s, k) < ref.dist(y, s, best)) best = k;
              ++total;
              if (code[size_t(s)] != best) {
                ++mismatched;
                EXPECT_LE(ref.dist(y, s, code[size_t(s)]), ref.dist(y, s, best) + 1e-4);
              }
            }
            const std::vector<double> xh = ref.head(code.data());
            if (side == Side::Key) {
              // scores: the lookup table and the decoded tile both give q · x̂
              double want = 0;
              for (int i = 0; i < kD; ++i) want += double(q[i]) * xh[size_t(i)];
              std::vector<float> qd(size_t(ch.domain_dim())), tab(size_t(ch.table_dim())), dec(size_t(ch.domain_dim()));
              ch.query_to_domain(q, qd.data());
              ch.query_table(qd.data(), tab.data());
              float got = 0;
              ch.score_codes(tab.data(), code.data(), 0, 1, &got);
              ch.decode(code.data(), 0, 1, dec.data());
              double viadec = 0;
              for (int i = 0; i < ch.domain_dim(); ++i) viadec += double(qd[size_t(i)]) * dec[size_t(i)];
              const double tol = 1e-4 * (1 + std::abs(want)) + 1e-5 * std::sqrt(double(kD)) * 10;
              EXPECT_NEAR(got, want, tol);
              EXPECT_NEAR(viadec, want, tol);
            } else {
              float rec[kD];
              ch.reconstruct(code.data(), 0, rec);
              for (int i = 0; i < kD; ++i) EXPECT_NEAR(rec[i], xh[size_t(i)], 1e-6);
            }
          }
          EXPECT_LE(mismatched, total / 100) << "codes differing from the exact nearest centroid";
        }
      }
}

struct SpectralRef {
  std::vector<float> U, mean, scale, bits;
  std::map<int, std::vector<float>> c, t;
  std::vector<double> recon(const float* x, std::vector<int>* codes = nullptr) const {
    std::vector<double> out(mean.begin(), mean.end()), w(kD);
    double ss = 0;
    for (int i = 0; i < kD; ++i) {
      double z = 0;
      for (int j = 0; j < kD; ++j) z += double(U[size_t(i) * kD + j]) * (double(x[j]) - mean[size_t(j)]);
      w[size_t(i)] = z / scale[size_t(i)];
      ss += w[size_t(i)] * w[size_t(i)];
    }
    const double r = round_half(float(std::sqrt(ss / kD)));  // the token's RMS, stored as fp16
    for (int i = 0; i < kD; ++i) {
      const int b = int(bits[size_t(i)]);
      if (!b) continue;
      const float zs = float(w[size_t(i)] / r);
      int idx = 0;
      for (float th : t.at(b)) idx += zs > th;
      if (codes) codes->push_back(idx);
      for (int j = 0; j < kD; ++j)
        out[size_t(j)] += double(U[size_t(i) * kD + j]) * r * scale[size_t(i)] * c.at(b)[size_t(idx)];
    }
    return out;
  }
};

SpectralRef spectral_ref(const KVContext& c, Side side, int h) {
  SpectralRef r;
  const std::string p = calibrated_prefix("spectral", 3);
  r.U = table(c, p, side, h, "rotation"), r.mean = table(c, p, side, h, "mean");
  r.scale = table(c, p, side, h, "scale"), r.bits = table(c, p, side, h, "bits");
  for (float b : r.bits)
    if (b > 0 && !r.c.count(int(b))) {
      r.c[int(b)] = table(c, p, side, h, fmt::format("cb{}.centroids", int(b)));
      r.t[int(b)] = table(c, p, side, h, fmt::format("cb{}.thresholds", int(b)));
    }
  return r;
}

TEST(Spectral, TablesAreARotationAndABudget) {
  const KVContext c = ctx_for(1);
  for (Side side : {Side::Key, Side::Value})
    for (int h = 0; h < kHeads; ++h) {
      const SpectralRef r = spectral_ref(c, side, h);
      double sum = 0;
      for (int i = 0; i < kD; ++i) {
        sum += r.bits[size_t(i)];
        if (i) {  // descending eigenvalue, non-increasing bits
          EXPECT_LE(r.bits[size_t(i)], r.bits[size_t(i) - 1]);
          EXPECT_LE(r.scale[size_t(i)], r.scale[size_t(i) - 1]);
        }
        for (int j = 0; j < kD; ++j) {
          double dot = 0;
          for (int e = 0; e < kD; ++e) dot += double(r.U[size_t(i) * kD + e]) * r.U[size_t(j) * kD + e];
          EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5);
        }
      }
      EXPECT_EQ(sum, 3.0 * kD);
      EXPECT_GT(r.bits[0], 3.0f);  // the signal coordinates get more than the average
    }
}

TEST(Spectral, EncodeDecodeScoreMatchScalarReferenceAndBeatTurboQuant) {
  std::mt19937 g(33);
  std::normal_distribution<float> nd;
  for (int layer = 0; layer < kLayers; ++layer)
    for (Side side : {Side::Key, Side::Value}) {
      const KVContext c = ctx_for(layer);
      const auto codec = make_codec(parse_kv_spec("spectral:bits=3", "t"), side, c);
      EXPECT_EQ(codec->bits_per_element(), 3.0 + 16.0 / kD);  // codes and the token's fp16 RMS
      KVContext plain;
      plain.head_dim = kD;
      const auto tq = make_codec(parse_kv_spec("turboquant_mse:bits=3", "t"), Side::Value, plain);
      for (int h = 0; h < kHeads; ++h) {
        const Codec& ch = codec->for_head(h);
        const SpectralRef ref = spectral_ref(c, side, h);
        double err_sq = 0, err_tq = 0;
        for (int t = 0; t < 200; ++t) {
          float x[kD], q[kD];
          draw(g, side == Side::Key, layer, h, x);
          for (float& e : q) e = nd(g);
          std::vector<uint8_t> code(ch.group_bytes()), tcode(tq->group_bytes());
          ch.encode(x, kD, code.data());
          const std::vector<double> want = ref.recon(x);
          std::vector<float> dom(size_t(ch.domain_dim())), qd(size_t(ch.domain_dim()));
          ch.decode(code.data(), 0, 1, dom.data());
          float rec[kD] = {};
          ch.domain_to_head(dom.data(), rec);
          double s_want = 0, s_got = 0;
          ch.query_to_domain(q, qd.data());
          for (int i = 0; i < ch.domain_dim(); ++i) s_got += double(qd[size_t(i)]) * dom[size_t(i)];
          for (int i = 0; i < kD; ++i) {
            EXPECT_NEAR(rec[i], want[size_t(i)], 1e-4 * (1 + std::abs(want[size_t(i)])));
            s_want += double(q[i]) * want[size_t(i)];
            err_sq += std::pow(double(x[i]) - want[size_t(i)], 2);
          }
          EXPECT_NEAR(s_got, s_want, 1e-4 * (1 + std::abs(s_want)));
          tq->encode(x, kD, tcode.data());
          float trec[kD];
          tq->reconstruct(tcode.data(), 0, trec);
          for (int i = 0; i < kD; ++i) err_tq += std::pow(double(x[i]) - trec[i], 2);
        }
        // the calibrated rotation and allocation beat a random rotation at the same 3 bits
        EXPECT_LT(err_sq, 0.8 * err_tq) << side_name(side) << " head " << h;
      }
    }
}

// ---- the quantized cache with calibrated methods ----------------------------------------------

// Attention through the cache (vecinfer keys scored by lookup tables; spectral values; two kv
// heads with their own tables, decode mode, no window) against softmax over the references'
// reconstructions of the fp16-rounded inputs.
TEST(CalibratedCache, AttentionMatchesReference) {
  auto cache = decode_cache("vecinfer:bits=2", "spectral:bits=3", shared_dir(), 320);
  std::mt19937 g(44);
  const int n = 300, HD = kHeads * kD, QD = 4 * kD;
  for (int layer = 0; layer < kLayers; ++layer) {
    std::vector<float> k, v, q, out(size_t(n) * QD);
    draw_layer(g, layer, n, k, v, q);
    cache->append(layer, k.data(), v.data(), n, 0);
    cache->attend(layer, q.data(), n, 0, out.data());
    const KVContext c = ctx_for(layer);
    for (int h = 0; h < kHeads; ++h) {
      const VecInferRef kr = vecinfer_ref(c, 2, Side::Key, h);
      const SpectralRef vr = spectral_ref(c, Side::Value, h);
      std::vector<std::vector<double>> kh(n), vh(n);
      for (int t = 0; t < n; ++t) {
        float kx[kD], vx[kD];
        for (int i = 0; i < kD; ++i)
          kx[i] = round_half(k[size_t(t) * HD + h * kD + i]), vx[i] = round_half(v[size_t(t) * HD + h * kD + i]);
        const auto y = kr.transform(kx);  // exact nearest codes (a rare tie may differ: tolerance)
        std::vector<uint8_t> code(size_t(kr.m));
        for (int s = 0; s < kr.m; ++s) {
          int best = 0;
          for (int e = 1; e < 256; ++e)
            if (kr.dist(y, s, e) < kr.dist(y, s, best)) best = e;
          code[size_t(s)] = uint8_t(best);
        }
        kh[size_t(t)] = kr.head(code.data());
        vh[size_t(t)] = vr.recon(vx);
      }
      for (int t = 0; t < n; ++t)
        for (int qh = h * 2; qh < h * 2 + 2; ++qh) {
          const auto o = ref_attend(q.data() + size_t(t) * QD + qh * kD, kh, t,
                                    [&](int j, int i) { return vh[size_t(j)][size_t(i)]; });
          for (int i = 0; i < kD; ++i)
            EXPECT_NEAR(out[size_t(t) * QD + qh * kD + i], o[size_t(i)], 2e-3 * (1 + std::abs(o[size_t(i)])))
                << "layer " << layer << " pos " << t << " head " << qh;
        }
    }
  }
}

// ---- nearest-codeword search (vq_search.h) ------------------------------------------------------

// The definition, written out: score = ‖c‖² (float, summed in index order) + Σ_i m_i·c_i in index
// order, multiply and add separate; the lowest index wins a tie.
int nearest_reference(const float* m2, const float* C, int k, int d) {
  int best = -1;
  float bv = 0;
  for (int c = 0; c < k; ++c) {
    volatile float cn = 0;  // volatile: no contraction or reordering of these sums
    for (int i = 0; i < d; ++i) cn = cn + float(C[size_t(c) * d + i] * C[size_t(c) * d + i]);
    volatile float a = cn;
    for (int i = 0; i < d; ++i) {
      const volatile float p = m2[i] * C[size_t(c) * d + i];
      a = a + p;
    }
    if (best < 0 || a < bv) bv = a, best = c;
  }
  return best;
}

// The tiled search returns the definition's codes on rows built to be hard: codebooks with outlier
// channels and a duplicated codeword, rows at codewords and at midpoints between two (exact and
// near ties), heavy-tailed and tiny rows, zero and non-finite rows, in batches that are not a
// multiple of the row block; and k not a multiple of 16 takes the other layout.
TEST(VqSearch, TiledSearchMatchesTheDefinition) {
  std::mt19937 g(77);
  std::normal_distribution<float> nd;
  std::student_t_distribution<float> heavy(2.0f);
  for (const int k : {256, 24}) {
    const int d = 64;
    std::vector<float> C(size_t(k) * d);
    for (int c = 0; c < k; ++c)
      for (int i = 0; i < d; ++i) C[size_t(c) * d + i] = nd(g) * (i % 17 == 3 ? 12.0f : 1.0f);  // outlier channels
    const int dup = k - 3;
    for (int i = 0; i < d; ++i) C[size_t(dup) * d + i] = C[size_t(7) * d + i];  // 7 must win its ties
    NearestCodeword nc(C.data(), k, d);
    std::vector<float> rows;
    auto add = [&](const std::vector<float>& r) {
      for (float x : r) rows.push_back(-2.0f * x);
    };  // m2 = −2r
    std::vector<float> r(static_cast<size_t>(d));
    for (int t = 0; t < 600; ++t) {
      const int kind = t % 6;
      const int a = int(g() % unsigned(k)), b = int(g() % unsigned(k));
      for (int i = 0; i < d; ++i) {
        const float ca = C[size_t(a) * d + i], cb = C[size_t(b) * d + i];
        switch (kind) {
          case 0: r[size_t(i)] = nd(g) * (i % 17 == 3 ? 12.0f : 1.0f); break;
          case 1: r[size_t(i)] = heavy(g); break;
          case 2: r[size_t(i)] = ca; break;                                // exactly a codeword
          case 3: r[size_t(i)] = 0.5f * (ca + cb); break;                  // equidistant from two
          case 4: r[size_t(i)] = 0.5f * (ca + cb) + 1e-6f * nd(g); break;  // nearly so
          default: r[size_t(i)] = 1e-3f * nd(g) + (t % 12 == 5 ? C[size_t(7) * d + i] : 0.0f); break;
        }
      }
      add(r);
    }
    add(std::vector<float>(size_t(d), 0.0f));
    r.assign(size_t(d), 1.0f);
    r[5] = NAN;
    add(r);
    r[5] = INFINITY;
    add(r);
    const int n = int(rows.size()) / d;
    std::vector<int> want(static_cast<size_t>(n)), got(want);
    for (int t = 0; t < n; ++t) want[size_t(t)] = nearest_reference(rows.data() + size_t(t) * d, C.data(), k, d);
    for (int t0 = 0; t0 < n; t0 += 37) nc.search(rows.data() + size_t(t0) * d, std::min(37, n - t0), got.data() + t0);
    int differ = 0, at_dup = 0, at_7 = 0;
    for (int t = 0; t < n; ++t)
      differ += got[size_t(t)] != want[size_t(t)], at_dup += want[size_t(t)] == dup, at_7 += want[size_t(t)] == 7;
    EXPECT_EQ(differ, 0) << "k " << k;
    EXPECT_EQ(at_dup, 0);  // the duplicate's later index never wins its ties
    EXPECT_GT(at_7, 0);
  }
}

// ---- the command line: bad options are one line, exit 2 -----------------------------------------

TEST(CliKvCodebook, BadOptionsAreOneLineExit2) {
  auto run = [](const std::string& args, std::string* out) {
    return test::run_cmd(test::quanttool_bin() + " calibrate --method kv-codebook " + args, out);
  };
  auto lines = [](const std::string& s) { return std::count(s.begin(), s.end(), '\n'); };
  const std::string valid = test::data_file("wikitext-2/wiki.valid.tokens.txt");
  std::string out;
  EXPECT_EQ(run("--kv turboquant_mse:bits=3 --model M --text " + valid + " --out /tmp/x", &out), 2) << out;
  EXPECT_EQ(lines(out), 1) << out;
  EXPECT_NE(out.find("needs no calibration"), std::string::npos) << out;
  EXPECT_EQ(run("--kv vecinfer:bits=2 --kv-sides all --model M --text " + valid + " --out /tmp/x", &out), 2) << out;
  EXPECT_NE(out.find("--kv-sides all"), std::string::npos) << out;
  EXPECT_EQ(run("--model M --text " + valid + " --out /tmp/x", &out), 2) << out;  // no --kv
  EXPECT_NE(out.find("give --kv"), std::string::npos) << out;
  EXPECT_EQ(run("--kv commvq:bits=2,cb=3 --model M --text " + valid + " --out /tmp/x", &out), 2)
      << out;  // commvq: cb 2, 4, 8
  EXPECT_EQ(lines(out), 1) << out;
  EXPECT_NE(out.find("cb=3"), std::string::npos) << out;
  EXPECT_EQ(run("--kv commvq:bits=2 --kv-sides values --model M --text " + valid + " --out /tmp/x", &out), 2) << out;
  EXPECT_EQ(lines(out), 1) << out;
  EXPECT_NE(out.find("keys only"), std::string::npos) << out;
  // a calibrated method without its tables: eval-ppl refuses before any work, naming the command
  const std::string model = test::model_gguf();
  QT_REQUIRE_FILE(model);
  EXPECT_EQ(test::run_cmd(test::quanttool_bin() + " eval-ppl --model " + model + " --text " + valid +
                              " --chunks 1 --kv-k vecinfer:bits=2 --kv-v f16",
                          &out),
            2)
      << out;
  EXPECT_NE(out.find("calibrate --method kv-codebook --kv vecinfer:bits=2"), std::string::npos) << out;
}

}  // namespace
}  // namespace qt
