// The KV caches against scalar references:
//  * the quantized cache's attention against a scalar reference over the reconstructed K̂/V̂
//    (cache and decode visibility, residual windows, KIVI token groups, batches ending on and
//    just past window edges, decode batches longer than the window);
//  * the full-precision ring: rows and runs against every pushed row (short, filling, wrapping
//    and overlong pushes);
//  * the fp16 cache through both engines (dense and quantized) agrees;
//  * key centering: attention unchanged at full precision, quantized keys closer; the recorder's
//    means (calib/key_mean.h) against the arithmetic mean; the key-mean file round trip and its
//    shape check.
#include <cmath>
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "calib/key_mean.h"
#include "formats/error.h"
#include "libquant/kv/artifacts.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/key_center.h"
#include "libquant/kv/token_ring.h"
#include "tests/support.h"

namespace qt {
namespace {

namespace fs = std::filesystem;
using namespace qt::kv;

// ---- the quantized cache against a scalar reference ------------------------------------------

// Attention of every query over the cache state it should see, from codec.reconstruct() and
// the fp16-rounded window, in double.
std::vector<float> reference_attention(const KVShape& s, const KVConfig& cfg, const std::vector<float>& K,
                                       const std::vector<float>& V, const std::vector<float>& Q, int n,
                                       const std::vector<int>& batches) {
  const int D = s.head_dim, KH = s.n_kv_heads, NH = s.n_heads, grp = NH / KH;
  KVContext c;
  c.head_dim = D;
  c.seed = cfg.seed;
  std::unique_ptr<Codec> ck, cv;
  if (!cfg.k[0].full_precision()) ck = make_codec(cfg.k[0], Side::Key, c);
  if (!cfg.v[0].full_precision()) cv = make_codec(cfg.v[0], Side::Value, c);
  auto boundary = [&](const Codec* cd, const KVSpec& sp, int64_t m) -> int64_t {
    if (!cd) return 0;
    const int R = int(sp.number("r", sp.method == "kivi" && cfg.residual < 0 ? 128 : std::max(0, cfg.residual), ""));
    if (cd->token_group() == 1) return std::max<int64_t>(0, m - R);
    const int u = R > 0 ? R : cd->token_group();
    return m / u * u;
  };
  auto half = [](float x) { return f16_to_f32(f32_to_f16(x)); };
  // codes of every group of every head (encoded from fp16-rounded values, as the cache does)
  auto encode_all = [&](const Codec* cdp, const std::vector<float>& X) {
    std::vector<std::vector<uint8_t>> none;
    if (!cdp) return none;
    const Codec& cd = *cdp;
    const int G = cd.token_group();
    std::vector<std::vector<uint8_t>> codes(KH, std::vector<uint8_t>(size_t(n / G + 1) * cd.group_bytes()));
    for (int h = 0; h < KH; ++h)
      for (int g0 = 0; g0 + G <= n; g0 += G) {
        std::vector<float> x(size_t(G) * D);
        for (int t = 0; t < G; ++t)
          for (int d = 0; d < D; ++d) x[t * D + d] = half(X[(size_t(g0 + t) * KH + h) * D + d]);
        cd.encode(x.data(), D, codes[h].data() + size_t(g0 / G) * cd.group_bytes());
      }
    return codes;
  };
  auto kc = encode_all(ck.get(), K), vc = encode_all(cv.get(), V);
  std::vector<float> out(size_t(n) * NH * D);
  int p0 = 0;
  for (int nb : batches) {
    for (int i = p0; i < p0 + nb; ++i) {
      const int64_t state = cfg.mode == KVMode::Decode ? i + 1 : p0 + nb;
      for (int h = 0; h < NH; ++h) {
        const int g = h / grp;
        const int64_t bk = std::min<int64_t>(boundary(ck.get(), cfg.k[0], state), i + 1),
                      bv = std::min<int64_t>(boundary(cv.get(), cfg.v[0], state), i + 1);
        std::vector<double> sc(i + 1);
        std::vector<float> kh(D), vh(D);
        double m = -1e300;
        for (int j = 0; j <= i; ++j) {
          if (j < bk)
            ck->reconstruct(kc[g].data(), j, kh.data());
          else
            for (int d = 0; d < D; ++d) kh[d] = half(K[(size_t(j) * KH + g) * D + d]);
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += double(Q[(size_t(i) * NH + h) * D + d]) * kh[d];
          sc[j] = dot * s.scale;
          m = std::max(m, sc[j]);
        }
        double sum = 0;
        std::vector<double> o(D, 0.0);
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(sc[j] - m);
          sum += p;
          if (j < bv)
            cv->reconstruct(vc[g].data(), j, vh.data());
          else
            for (int d = 0; d < D; ++d) vh[d] = half(V[(size_t(j) * KH + g) * D + d]);
          for (int d = 0; d < D; ++d) o[d] += p * vh[d];
        }
        for (int d = 0; d < D; ++d) out[(size_t(i) * NH + h) * D + d] = float(o[d] / sum);
      }
    }
    p0 += nb;
  }
  return out;
}

void check_cache_against_reference(const std::string& kspec, const std::string& vspec, int residual, KVMode mode,
                                   const std::vector<int>& batches) {
  KVShape s;
  s.n_layers = 1, s.n_heads = 6, s.n_kv_heads = 2, s.head_dim = 64, s.scale = 0.125f;
  int n = 0;
  for (int b : batches) n += b;
  s.max_ctx = n;
  KVConfig cfg = uniform_kv_config(1, parse_kv_spec(kspec, "k"), parse_kv_spec(vspec, "v"));
  cfg.residual = residual;
  cfg.mode = mode;
  std::mt19937 g(9);
  std::normal_distribution<float> nd;
  std::vector<float> K(size_t(n) * 2 * 64), V(K.size()), Q(size_t(n) * 6 * 64), out(Q.size());
  for (auto* x : {&K, &V, &Q})
    for (float& v : *x) v = nd(g);
  for (size_t i = 0; i < K.size(); i += 64) K[i + 3] += 6.0f;  // an outlier channel, as real keys have
  auto cache = make_quant_kv_cache(s, cfg);
  int p0 = 0;
  for (int nb : batches) {
    cache->append(0, K.data() + size_t(p0) * 128, V.data() + size_t(p0) * 128, nb, p0);
    cache->attend(0, Q.data() + size_t(p0) * 384, nb, p0, out.data() + size_t(p0) * 384);
    p0 += nb;
  }
  const auto ref = reference_attention(s, cfg, K, V, Q, n, batches);
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, double(std::fabs(out[i] - ref[i])));
  EXPECT_LT(worst, 2e-4) << kspec << " / " << vspec << " r=" << residual
                         << (mode == KVMode::Decode ? " decode" : " cache");
}

TEST(QuantCache, AttentionMatchesScalarReference) {
  const std::vector<int> one_batch = {100}, ragged = {37, 1, 1, 45, 16};
  for (auto mode : {KVMode::Cache, KVMode::Decode})
    for (auto& b : {one_batch, ragged}) {
      check_cache_against_reference("turboquant_mse:bits=3", "turboquant_mse:bits=2.5", 0, mode, b);
      check_cache_against_reference("turboquant_prod:bits=3", "qjl:bits=2", 16, mode, b);
      check_cache_against_reference("kivi:bits=2", "kivi:bits=4", 32, mode, b);  // key groups of 32 flushed at 32
      check_cache_against_reference("kivi:bits=2,r=0", "affine:bits=3", 0, mode, b);
      check_cache_against_reference("rvq:bits=2,rot=dense", "polar:bits=3", 5, mode, b);
      check_cache_against_reference("f16", "affine:bits=8,group=64", 0, mode, b);
    }
}

// The rotation-based codecs (turboquant-mlx's V2 rotated / rot+QJL, fractional turboquant_mse, RaBitQ)
// through the cache: the same reference over their reconstructions.
TEST(QuantCache, Issue18PartACodecsMatchScalarReference) {
  const std::vector<int> ragged = {37, 1, 1, 45, 16};
  for (auto mode : {KVMode::Cache, KVMode::Decode}) {
    check_cache_against_reference("affine:bits=3,rot=qr,qjl=1", "affine:bits=4,rot=wht", 0, mode, ragged);
    check_cache_against_reference("rabitq:bits=1", "turboquant_mse:bits=2.25", 5, mode, ragged);
    check_cache_against_reference("rabitq:bits=3,rot=qr", "affine:bits=3,rot=wht,qjl=1", 0, mode, ragged);
    check_cache_against_reference("turboquant_mse:bits=2,n_outlier=8,outlier_bits=4", "rabitq:bits=2", 0, mode, ragged);
  }
}

// Windows at their edges: a first batch shorter than R, batches ending exactly on a group (and
// window) boundary, one position past it, decode batches longer than the window (earlier queries
// read positions later appends of their batch encoded), R = 0 with groups.
TEST(QuantCache, WindowEdgesMatchScalarReference) {
  const std::vector<int> edges = {5, 27, 32, 1, 31, 70, 2, 24}, long_batch = {3, 150, 39};
  for (auto mode : {KVMode::Cache, KVMode::Decode})
    for (auto& b : {edges, long_batch}) {
      check_cache_against_reference("kivi:bits=2", "kivi:bits=3", 32, mode, b);
      check_cache_against_reference("kivi:bits=2,group=64", "kivi:bits=2", 64, mode, b);
      check_cache_against_reference("kivi:bits=3,r=0", "turboquant_mse:bits=3", 7, mode, b);
      check_cache_against_reference("f16", "polar:bits=4", 40, mode, b);
    }
}

// ---- the full-precision ring (token_ring.h) ------------------------------------------------------

// Against every pushed row kept in full: rows, runs and what the ring forgets, for pushes shorter
// than the ring, exactly filling it, wrapping it and longer than it.
TEST(TokenRing, HoldsTheNewestPositionsInOrder) {
  for (bool round : {true, false}) {
    const int H = 2, D = 3, cap = 5;
    TokenRing ring(H, D, cap, round);
    std::mt19937 g(3);
    std::normal_distribution<float> nd;
    std::vector<float> all;  // [position][head][dim], as pushed (rounded when the ring rounds)
    for (int n : {2, 3, 4, 1, 12, 5, 0, 6}) {
      std::vector<float> x(size_t(n) * H * D);
      for (float& v : x) v = nd(g) * 1000.0f;  // fp16 rounding visible
      ring.push(x.data(), n);
      for (float v : x) all.push_back(round ? f16_to_f32(f32_to_f16(v)) : v);
      const int64_t end = int64_t(all.size()) / (H * D);
      ASSERT_EQ(ring.end(), end);
      ASSERT_EQ(ring.begin(), std::max<int64_t>(0, end - cap));
      auto want = [&](int64_t p, int h) { return all.data() + (size_t(p) * H + h) * D; };
      for (int h = 0; h < H; ++h) {
        for (int64_t p = ring.begin(); p < end; ++p)
          for (int d = 0; d < D; ++d) ASSERT_EQ(ring.row(h, p)[d], want(p, h)[d]) << p << " " << h;
        for (int64_t a = ring.begin(); a <= end; ++a)
          for (int64_t b = a; b <= end; ++b) {
            TokenRing::Run r[2];
            const int nr = ring.runs(h, a, b, r);
            ASSERT_LE(nr, 2);
            int64_t p = a;
            for (int i = 0; i < nr; ++i) {
              ASSERT_EQ(r[i].first, p);
              ASSERT_GT(r[i].n, 0);
              for (int j = 0; j < r[i].n; ++j, ++p)
                for (int d = 0; d < D; ++d) ASSERT_EQ(r[i].rows[j * D + d], want(p, h)[d]);
            }
            ASSERT_EQ(p, b);
            // two runs only where [a, b) crosses the end of the buffer
            EXPECT_EQ(nr == 2, b > a && a / cap != (b - 1) / cap) << a << ".." << b;
          }
      }
      if (ring.begin() > 0) {
        TokenRing::Run r[2];
        EXPECT_THROW(ring.runs(0, ring.begin() - 1, end, r), std::logic_error);
      }
    }
    ring.clear();
    EXPECT_EQ(ring.end(), 0);
    EXPECT_EQ(ring.begin(), 0);
  }
  TokenRing none(2, 3, 0, true);  // a side without a window: positions counted, none kept
  std::vector<float> x(4 * 6, 1.0f);
  none.push(x.data(), 4);
  EXPECT_EQ(none.end(), 4);
  EXPECT_EQ(none.begin(), 4);
}

TEST(QuantCache, Fp16ThroughBothEnginesAgree) {
  // The dense fp16 cache and the quantized cache with full-precision sides compute the same
  // attention (different kernels: equal to float rounding).
  KVShape s;
  s.n_layers = 1, s.n_heads = 9, s.n_kv_heads = 3, s.head_dim = 64, s.scale = 0.125f, s.max_ctx = 200;
  std::mt19937 g(4);
  std::normal_distribution<float> nd;
  std::vector<float> K(200 * 3 * 64), V(K.size()), Q(200 * 9 * 64), a(Q.size()), b(Q.size());
  for (auto* x : {&K, &V, &Q})
    for (float& v : *x) v = nd(g);
  auto dense = make_f32_kv_cache(s, DenseKv::F16);
  KVConfig cfg = uniform_kv_config(1, parse_kv_spec("f16", "k"), parse_kv_spec("f16", "v"));
  auto quant = make_quant_kv_cache(s, cfg);
  for (auto* c : {dense.get(), quant.get()}) {
    c->append(0, K.data(), V.data(), 120, 0);
    c->append(0, K.data() + 120 * 192, V.data() + 120 * 192, 80, 120);
  }
  dense->attend(0, Q.data() + 120 * 576, 80, 120, a.data());
  quant->attend(0, Q.data() + 120 * 576, 80, 120, b.data());
  for (size_t i = 0; i < 80 * 576; ++i) EXPECT_NEAR(a[i], b[i], 2e-5) << i;
  EXPECT_DOUBLE_EQ(dense->bytes_per_token(), quant->bytes_per_token());
}

// ---- key centering (key_center.h) --------------------------------------------------------------

// Two layers, two kv heads, each (layer, head) with its own large-mean channels, so that a mean
// applied to the wrong layer or head shows.
struct CenterCase {
  KVShape s;
  int n = 100;
  std::vector<float> K[2], V[2], Q[2];  // per layer
  std::shared_ptr<kv::KeyCenter> c = std::make_shared<kv::KeyCenter>();
  CenterCase() {
    s.n_layers = 2, s.n_heads = 6, s.n_kv_heads = 2, s.head_dim = 64, s.scale = 0.125f, s.max_ctx = n;
    std::mt19937 g(21);
    std::normal_distribution<float> nd;
    c->layers = 2, c->kv_heads = 2, c->head_dim = 64;
    c->mean.assign(2 * 2 * 64, 0.0f);
    for (int l = 0; l < 2; ++l) {
      K[l].resize(size_t(n) * 2 * 64), V[l].resize(K[l].size()), Q[l].resize(size_t(n) * 6 * 64);
      for (auto* x : {&K[l], &V[l], &Q[l]})
        for (float& v : *x) v = nd(g);
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < 2; ++h) {
          float* k = K[l].data() + (size_t(t) * 2 + h) * 64;
          k[3 + 10 * h + 20 * l] += 8.0f, k[17 + 2 * h + l] -= 5.0f + h;
          for (int d = 0; d < 64; ++d) c->mean[(size_t(l) * 2 + h) * 64 + d] += k[d] / float(n);
        }
    }
  }
  // Both layers' attention outputs, appended and attended in two batches.
  std::vector<float> run(const std::string& method, bool centered, int residual = 0,
                         KVMode mode = KVMode::Cache) const {
    KVConfig cfg = uniform_kv_config(2, parse_kv_spec(method, "k"), parse_kv_spec("f32", "v"));
    cfg.residual = residual;
    cfg.mode = mode;
    if (centered) cfg.key_center = c;
    auto cache = make_kv_cache(cfg, s);
    std::vector<float> out(2 * Q[0].size());
    for (auto [p0, nb] : {std::pair{0, 60}, std::pair{60, 40}})
      for (int l = 0; l < 2; ++l) {
        cache->append(l, K[l].data() + size_t(p0) * 128, V[l].data() + size_t(p0) * 128, nb, p0);
        cache->attend(l, Q[l].data() + size_t(p0) * 384, nb, p0, out.data() + l * Q[0].size() + size_t(p0) * 384);
      }
    return out;
  }
};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) w = std::max(w, double(std::fabs(a[i] - b[i])));
  return w;
}
double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) w += double(a[i] - b[i]) * double(a[i] - b[i]);
  return std::sqrt(w / double(a.size()));
}

TEST(KeyCenter, AttentionUnchangedAndQuantizedKeysCloser) {
  const CenterCase cc;
  const auto ref = cc.run("f32", false);
  EXPECT_LT(max_abs_diff(cc.run("f32", true), ref), 2e-5);  // softmax is shift-invariant
  // Through the quantized cache with every key in its fp16 window (r ≥ n) and through the dense
  // fp16 cache, in both modes: centered keys only round to fp16 differently.
  for (auto mode : {KVMode::Cache, KVMode::Decode}) {
    EXPECT_LT(max_abs_diff(cc.run("turboquant_mse:bits=3", true, 128, mode),
                           cc.run("turboquant_mse:bits=3", false, 128, mode)),
              5e-3);
    EXPECT_LT(max_abs_diff(cc.run("f16", true, 0, mode), ref), 5e-3);
  }
  // Centering takes the keys' norm from about 12.4 to 8: TurboQuant's error scales with the norm
  // (0.73x here; part of the plain error is common to all keys and cancels in softmax), affine's
  // with the per-token range (0.43x).
  for (const char* m : {"turboquant_mse:bits=3", "affine:bits=4"}) {
    const double plain = rms_diff(cc.run(m, false), ref), centered = rms_diff(cc.run(m, true), ref);
    EXPECT_LT(centered, 0.85 * plain) << m << ": plain " << plain << ", centered " << centered;
  }
}

TEST(KeyCenter, RecorderAveragesEveryKeyAndFileRoundTrips) {
  const CenterCase cc;
  calib::KeyMeanRecorder rec(cc.s);
  for (int l = 0; l < 2; ++l) {
    rec.append(l, cc.K[l].data(), cc.V[l].data(), 30, 0);
    rec.append(l, cc.K[l].data() + 30 * 128, cc.V[l].data() + 30 * 128, 70, 30);
  }
  const kv::KeyCenter m = rec.mean();
  ASSERT_EQ(m.mean.size(), 256u);
  EXPECT_EQ(rec.tokens(), 100);
  for (int l = 0; l < 2; ++l)
    for (int i = 0; i < 128; ++i) {
      double want = 0;
      for (int t = 0; t < 100; ++t) want += cc.K[l][size_t(t) * 128 + i];
      EXPECT_NEAR(m.mean[size_t(l) * 128 + i], want / 100, 1e-5) << l << " " << i;
    }
  const std::string dir = test::temp_dir("key-mean");
  kv::save_key_center(dir + "/m.safetensors", m, rec.tokens(), "synthetic");
  const auto back = kv::load_key_center(dir + "/m.safetensors", cc.s);
  EXPECT_EQ(back->mean, m.mean);
  KVShape other = cc.s;
  other.n_kv_heads = 3;
  EXPECT_THROW(kv::load_key_center(dir + "/m.safetensors", other), UserError);
  kv::PrecomputeOptions po;
  po.head_dim = 64;
  kv::write_kv_artifacts(dir + "/art", po);
  EXPECT_THROW(kv::load_key_center(dir + "/art/rotations.safetensors", cc.s), UserError);
  EXPECT_THROW(kv::load_key_center(dir + "/none.safetensors", cc.s), UserError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qt
