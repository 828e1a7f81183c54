// The KV methods on the GPU (libquant/cuda/kv.h) against the CPU codecs and caches, and the CLI's
// refusals (any build: --device cuda without CUDA or without a device, and a method not on the GPU,
// are one line and exit 2).
#include "tests/cuda_support.h"

namespace qt {
namespace {

using namespace cudatest;

// ------------------------------------------------------------------- KV methods on the GPU (kv.h)

kv::KVConfig kv_config(const std::string& k, const std::string& v, kv::KVMode mode, int n_layers = 1) {
  kv::KVConfig c = kv::uniform_kv_config(n_layers, kv::parse_kv_spec(k, "--kv-k"), kv::parse_kv_spec(v, "--kv-v"));
  c.mode = mode;
  return c;
}
// K/V-like rows: N(0, 1) with a few large channels (as real keys have), rounded to f16 as the
// cache rounds them on the way in.
std::vector<float> kv_rows(int n, int D, uint32_t seed) {
  auto x = randn(size_t(n) * D, seed);
  for (int t = 0; t < n; ++t)
    for (int d = 0; d < D; d += 13) x[size_t(t) * D + d] *= 6.0f;
  for (float& v : x) v = f16v(v);
  return x;
}

// The CPU codec's bytes for the positions the cache encodes after n tokens: the reference.
std::vector<uint8_t> cpu_codes(const kv::KVSpec& spec, bool key, const kv::KVConfig& cfg, const std::vector<float>& x,
                               int n, int D, int64_t enc) {
  kv::KVContext ctx;
  ctx.head_dim = D;
  ctx.seed = cfg.seed;
  auto codec = kv::make_codec(spec, key ? kv::Side::Key : kv::Side::Value, ctx);
  const int G = codec->token_group();
  const size_t gb = codec->group_bytes();
  std::vector<uint8_t> out(size_t(enc / G) * gb, 0);
  for (int64_t g = 0; g < enc / G; ++g) codec->encode(&x[size_t(g) * G * D], D, &out[size_t(g) * gb]);
  (void)n;
  return out;
}

struct KvCase {
  std::string spec;
  bool key;
  int64_t enc;  // positions encoded after n = 160 tokens (the cache's boundary)
};

// Encode on the GPU gives the CPU codec's bytes, every one, for every method and width cuda runs
// (kivi keys: groups of 32 tokens per channel, r = 128: 128 of 160 positions; kivi values: per
// token, the newest 128 kept exact: 32 encoded).
TEST(Cuda, KvEncodeMatchesCpuCodes) {
  QT_REQUIRE_GPU();
  const int n = 160;
  const std::vector<KvCase> cases = {
      {"affine:bits=4", true, n},
      {"affine:bits=2,group=64", false, n},
      {"affine:bits=3", true, n},
      {"affine:bits=8,group=64", false, n},
      {"kivi:bits=2", true, 128},
      {"kivi:bits=4,r=0", true, n},
      {"kivi:bits=3,group=64,r=64", true, 128},
      {"kivi:bits=2", false, 32},
      {"kivi:bits=4,r=0", false, n},
      {"turboquant_mse:bits=1", true, n},
      {"turboquant_mse:bits=2", false, n},
      {"turboquant_mse:bits=2.5", true, n},
      {"turboquant_mse:bits=3", true, n},
      {"turboquant_mse:bits=3.5", false, n},
      {"turboquant_mse:bits=4", true, n},
      {"turboquant_mse:bits=2,n_outlier=8,outlier_bits=4", true, n},
      {"turboquant_mse:bits=3,r=32", false, n - 32},
  };
  for (int D : {64, 128}) {
    const auto x = kv_rows(n, D, 21 + D);
    for (const KvCase& c : cases) {
      const kv::KVConfig cfg = kv_config("f16", "f16", kv::KVMode::Cache);
      const kv::KVSpec spec = kv::parse_kv_spec(c.spec, "kv");
      const auto want = cpu_codes(spec, c.key, cfg, x, n, D, c.enc);
      const auto got = cuda::testing::kv_encode(spec, c.key, cfg, x, n, D);
      ASSERT_EQ(got.size(), want.size()) << c.spec << " D=" << D;
      size_t diff = 0;
      for (size_t i = 0; i < got.size(); ++i) diff += got[i] != want[i];
      size_t first = 0;
      while (first < got.size() && got[first] == want[first]) ++first;
      if (diff) {
        std::printf("%s D=%d: %zu bytes differ, first %zu of %zu: gpu/cpu", c.spec.c_str(), D, diff, first, got.size());
        for (size_t i = first; i < std::min(got.size(), first + 8); ++i) std::printf(" %02x/%02x", got[i], want[i]);
        std::printf("  x0..3 %g %g %g %g\n", x[0], x[1], x[2], x[3]);
      }
      EXPECT_EQ(diff, 0u) << c.spec << (c.key ? " keys" : " values") << " D=" << D << ": " << diff << " of "
                          << got.size() << " bytes differ";
    }
  }
}

// Decode into the domain: the CPU codec's decode (fp32) as f16, and after the boundary the exact
// vectors (turboquant: rotated, Π x).
TEST(Cuda, KvDecodeMatchesCpu) {
  QT_REQUIRE_GPU();
  const int n = 160, D = 64;
  const auto x = kv_rows(n, D, 5);
  for (const KvCase& c : std::vector<KvCase>{{"affine:bits=4", true, n},
                                             {"kivi:bits=2", true, 128},
                                             {"kivi:bits=2", false, 32},
                                             {"turboquant_mse:bits=3,r=32", true, n - 32},
                                             {"turboquant_mse:bits=2.5", false, n}}) {
    const kv::KVConfig cfg = kv_config("f16", "f16", kv::KVMode::Cache);
    const kv::KVSpec spec = kv::parse_kv_spec(c.spec, "kv");
    kv::KVContext ctx;
    ctx.head_dim = D;
    auto codec = kv::make_codec(spec, c.key ? kv::Side::Key : kv::Side::Value, ctx);
    const auto codes = cpu_codes(spec, c.key, cfg, x, n, D, c.enc);
    std::vector<float> want(size_t(n) * D);
    if (c.enc > 0) codec->decode(codes.data(), 0, int(c.enc), want.data());
    const bool rot = spec.method == "turboquant_mse";
    const kv::Rotation R = ctx.rotation("wht");
    for (int64_t j = c.enc; j < n; ++j) {
      if (rot)
        R.apply(&x[size_t(j) * D], &want[size_t(j) * D]);
      else
        std::copy(&x[size_t(j) * D], &x[size_t(j + 1) * D], &want[size_t(j) * D]);
    }
    const auto got = cuda::testing::kv_decode(spec, c.key, cfg, x, n, D);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, double(std::abs(got[i] - f16v(want[i]))) / std::max(1e-3, double(std::abs(want[i]))));
    EXPECT_LT(worst, 1.5e-3) << c.spec << ": relative to the CPU's decode rounded to f16 (one f16 ulp)";
  }
}

// Attention through the quantized cache: the GPU against the CPU's QuantCache (make_kv_cache) on
// the same K/V, chunk by chunk, in cache and decode mode, for each method, with residual windows
// and mixed key/value methods; the quantized result is far from the f16 cache's, so the tolerance
// (f16 domain vectors and probabilities on the GPU) is a real bar.
TEST(Cuda, KvAttentionMatchesCpuQuantCache) {
  QT_REQUIRE_GPU();
  const int B = 2, T = 192, nh = 6, nkv = 2, D = 64, Q = nh * D, KV = nkv * D;
  const float scale = 0.125f;
  auto q = randn(size_t(B) * T * Q, 31, 1.5f), k = kv_rows(B * T * nkv, D, 32), v = kv_rows(B * T * nkv, D, 33);
  for (float& x : q) x = f16v(x);
  KVShape s;
  s.n_layers = 1, s.n_heads = nh, s.n_kv_heads = nkv, s.head_dim = D, s.max_ctx = T, s.scale = scale;
  auto cpu_attention = [&](const kv::KVConfig& cfg) {
    auto cache = make_kv_cache(cfg, s);
    std::vector<float> out(size_t(B) * T * Q);
    for (int b = 0; b < B; ++b) {
      cache->clear();
      cache->append(0, &k[size_t(b) * T * KV], &v[size_t(b) * T * KV], T, 0);
      cache->attend(0, &q[size_t(b) * T * Q], T, 0, &out[size_t(b) * T * Q]);
    }
    return out;
  };
  const auto exact = cpu_attention(kv_config("f16", "f16", kv::KVMode::Cache));
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"affine:bits=4", "affine:bits=4"},
      {"affine:bits=2,r=48", "affine:bits=3,group=64,r=16"},
      {"kivi:bits=2", "kivi:bits=2"},
      {"kivi:bits=4,r=0", "kivi:bits=4,r=0"},
      {"turboquant_mse:bits=3", "turboquant_mse:bits=3"},
      {"turboquant_mse:bits=2.5,r=40", "turboquant_mse:bits=2,r=24"},
      {"kivi:bits=2", "f16"},
      {"f16", "turboquant_mse:bits=2"},
      {"kivi:bits=2,r=64", "kivi:bits=2,r=64"},
  };
  // Decode windows run banded where 2W < T (attention.h: r = 48, 16; 40 with a partial last
  // block; kivi r = 0's token groups; r = 64) and over T × T otherwise (r = 128): both paths meet
  // the CPU.
  for (int pass = 0; pass < 2; ++pass)
    for (auto& [km, vm] : methods) {
      const kv::KVMode mode = pass == 0 ? kv::KVMode::Cache : kv::KVMode::Decode;
      const kv::KVConfig cfg = kv_config(km, vm, mode);
      const auto want = cpu_attention(cfg);
      const auto got = cuda::testing::kv_attention(cfg, q, k, v, B, T, nh, nkv, D, scale);
      ASSERT_EQ(got.size(), want.size());
      double worst = 0, moved = 0, mag = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, double(std::abs(got[i] - want[i])));
        moved = std::max(moved, double(std::abs(want[i] - exact[i])));
        mag = std::max(mag, double(std::abs(want[i])));
      }
      const std::string what = km + " / " + vm + (pass == 0 ? " cache" : " decode");
      std::printf("kv attention %-58s worst %.2e of |out| <= %.1f, the method moves it %.3f\n", what.c_str(), worst,
                  mag, moved);
      // f16 domain vectors and f16 probabilities: about 1e-3 of the largest output, as the f16
      // cache's own test (AttentionMatchesCpuF16Cache: 3e-3 for outputs up to ~4)
      EXPECT_LT(worst, 3e-3 + 2e-3 * mag) << what << " (the method moves the output by " << moved << ")";
      EXPECT_GT(moved, 10 * worst) << what;
    }
}

// The whole forward with a quantized cache: eval-ppl on the tiny llama (head_dim 8: turboquant_mse,
// the method whose WHT fits it) against the CPU's bf16 path with the same KV config, cache and
// decode mode. bf16 moves K, and a 2–3-bit code turns that into whole steps at its boundaries, so
// the GPU is held to what bf16 does to the CPU's own PPL with the same cache (its bf16 path
// against its f32 path): within 2e-3 + 1.5x that.
TEST(Cuda, TinyLlamaQuantizedKvMatchesCpu) {
  QT_REQUIRE_GPU();
  const auto ids = random_ids(5 * 32, 13);
  Checkpoint a = load_checkpoint(tiny_dir());
  LlamaModel cbf(a, Compute::BF16), c32(a, Compute::F32);
  cuda::GpuModel gpu(load_checkpoint(tiny_dir()));
  for (auto mode : {kv::KVMode::Cache, kv::KVMode::Decode})
    for (const std::string m : {"turboquant_mse:bits=2", "turboquant_mse:bits=3,r=8"}) {
      PplOptions po;
      po.ctx = 32;
      po.bos_id = 1;
      po.kv = kv_config(m, m, mode, a.config.n_layers);
      const PplResult want = evaluate_perplexity(cbf, ids, po);
      PplOptions pf = po;
      pf.kv = kv_config("f16", "f16", mode, a.config.n_layers);
      const PplResult f16 = evaluate_perplexity(cbf, ids, pf);
      const PplResult got = cuda::evaluate_perplexity(gpu, ids, po, 2);
      EXPECT_EQ(got.kv_name, want.kv_name);
      EXPECT_EQ(got.kv_bytes_per_token, want.kv_bytes_per_token);
      const double e_cpu = std::abs(want.ppl / evaluate_perplexity(c32, ids, po).ppl - 1.0);
      std::printf("tiny %s %s: gpu/cpu-bf16 PPL %.5f, cpu bf16/f32 %.5f\n", m.c_str(),
                  mode == kv::KVMode::Decode ? "decode" : "cache", got.ppl / want.ppl, 1.0 + e_cpu);
      EXPECT_LT(std::abs(got.ppl / want.ppl - 1.0), 2e-3 + 1.5 * e_cpu) << m;
      EXPECT_GT(std::abs(want.ppl / f16.ppl - 1.0), 4e-3) << m << ": the method must move the PPL more than the bar";
    }
}

// --------------------------------------------------------------------------- the CLI, any build

TEST(CudaCli, UnsupportedIsOneLineExit2) {
  const std::string bin = test::quanttool_bin(), text = test::source_dir() + "/data/wikitext-2/wiki.test.raw";
  // Every quantized method runs on the GPU (natively or through its CPU codec); f32, per-layer
  // recipes, key centering and --kv-stats do not.
  for (const std::string extra :
       {"", " --kv f32", " --kv-k f32", " --kv-stats", " --compute f32", " --kl-base-kv kivi"}) {
    std::string out;
    const int rc =
        test::run_cmd(bin + " eval-ppl --device cuda --model " + tiny_dir() + " --text " + text + extra, &out);
    EXPECT_EQ(rc, 2) << extra << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << extra << ": " << out;
    if (!cuda::built()) {
      EXPECT_NE(out.find("built without CUDA"), std::string::npos) << out;
    } else if (!extra.empty()) {
      EXPECT_NE(out.find("not on cuda yet"), std::string::npos) << extra << ": " << out;
    }
  }
}

}  // namespace
}  // namespace qt
