// The KV methods the GPU runs through their CPU codecs (KvSideGpu::HostCodec, libquant/cuda/kv_host.h)
// against the CPU's QuantCache on the same K/V: attention outputs in cache and decode mode, with
// windows, mixed with native kinds, the calibrated methods per layer from tables trained here; and
// eval-ppl on the tiny llama.
#include "calib/kv_codebook.h"
#include "libquant/cuda/kv_host.h"
#include "libquant/kv/calibrated.h"
#include "libquant/kv/codecs.h"
#include "tests/cuda_support.h"

namespace qt {
namespace {

using namespace cudatest;

constexpr int B = 2, T = 192, nh = 6, nkv = 2, D = 64, Q = nh * D, KV = nkv * D, kLayers = 2;
constexpr float kScale = 0.125f;

std::vector<float> inv_freq() {  // RoPE θ = 10000 over rotate-half pairs of the 64-dim head
  std::vector<float> f(D / 2);
  for (int i = 0; i < D / 2; ++i) f[size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / float(D));
  return f;
}

// K/V-like rows: N(0, 1) with a few large channels, a mean on one, rounded to f16 as the cache
// rounds them on the way in.
std::vector<float> kv_rows(int n, uint32_t seed) {
  auto x = randn(size_t(n) * D, seed);
  for (int t = 0; t < n; ++t)
    for (int d = 0; d < D; d += 13) x[size_t(t) * D + d] = x[size_t(t) * D + d] * 6.0f + (d == 13 ? 3.0f : 0.0f);
  for (float& v : x) v = f16v(v);
  return x;
}

struct Layer {
  std::vector<float> q, k, v;
};
Layer layer_data(int layer) {
  Layer L;
  L.q = randn(size_t(B) * T * Q, 41 + layer, 1.5f);
  for (float& x : L.q) x = f16v(x);
  L.k = kv_rows(B * T * nkv, 43 + layer), L.v = kv_rows(B * T * nkv, 47 + layer);
  return L;
}

kv::KVConfig config(const std::string& k, const std::string& v, kv::KVMode mode, const std::string& artifacts = "") {
  kv::KVConfig c = kv::uniform_kv_config(kLayers, kv::parse_kv_spec(k, "--kv-k"), kv::parse_kv_spec(v, "--kv-v"));
  c.mode = mode;
  c.artifacts = artifacts;
  return c;
}

std::vector<float> cpu_attention(const kv::KVConfig& cfg, const Layer& L, int layer) {
  KVShape s;
  s.n_layers = kLayers, s.n_heads = nh, s.n_kv_heads = nkv, s.head_dim = D, s.max_ctx = T, s.scale = kScale;
  s.rope_inv_freq = inv_freq();
  auto cache = make_kv_cache(cfg, s);
  std::vector<float> out(size_t(B) * T * Q);
  for (int b = 0; b < B; ++b) {
    cache->clear();
    cache->append(layer, &L.k[size_t(b) * T * KV], &L.v[size_t(b) * T * KV], T, 0);
    cache->attend(layer, &L.q[size_t(b) * T * Q], T, 0, &out[size_t(b) * T * Q]);
  }
  return out;
}

// The GPU against the CPU cache of cfg on layer `layer`. Tolerance as the native kinds' test
// (test_cuda_kv.cpp): the GPU holds the reconstruction in f16 (head space) and its probabilities
// in f16, so about 1e-3 of the largest output; and the method must move the output at least 10x
// that (else the check would not tell a codec from the f16 cache).
void expect_matches(const kv::KVConfig& cfg, const Layer& L, int layer, const std::vector<float>& exact) {
  const auto want = cpu_attention(cfg, L, layer);
  const auto got = cuda::testing::kv_attention(cfg, L.q, L.k, L.v, B, T, nh, nkv, D, kScale, inv_freq(), layer);
  ASSERT_EQ(got.size(), want.size());
  double worst = 0, moved = 0, mag = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, double(std::abs(got[i] - want[i])));
    moved = std::max(moved, double(std::abs(want[i] - exact[i])));
    mag = std::max(mag, double(std::abs(want[i])));
  }
  const std::string what = cfg.k[0].text() + " / " + cfg.v[0].text() +
                           (cfg.mode == kv::KVMode::Decode ? " decode" : " cache") + " layer " + std::to_string(layer);
  std::printf("kv host codec %-62s worst %.2e of |out| <= %.1f, the method moves it %.3f\n", what.c_str(), worst, mag,
              moved);
  EXPECT_LT(worst, 3e-3 + 2e-3 * mag) << what << " (the method moves the output by " << moved << ")";
  EXPECT_GT(moved, 10 * worst) << what;
}

// Without a device: the head-space reconstruction HostCodecs hands the GPU scores as the CPU scores
// (q · k̂ = ⟨query_to_domain(q), decode(j)⟩, to the f16 rounding of k̂) and mixes values as the CPU
// does (v̂ = domain_to_head(decode(j)), rounded to f16); positions after the boundary are x itself.
TEST(CudaHost, HeadSpaceReconstructionScoresAsTheDomain) {
  const int n = 40, enc = 33, H = 2;
  for (const char* m : {"turboquant_prod:bits=2", "qjl:bits=1", "rvq:bits=2", "polar:bits=3", "rabitq:bits=2",
                        "affine:bits=3,qjl=1,rot=wht", "turboquant_mse:bits=3,rot=dense"})
    for (bool key : {true, false}) {
      const kv::KVSpec spec = kv::parse_kv_spec(m, "t");
      const kv::KVConfig cfg = config(m, m, kv::KVMode::Cache);
      const cuda::HostCodecs hc(spec, key, cfg, D, kLayers, {});
      const auto x = kv_rows(B * n * H, 91);
      std::vector<uint16_t> xb(x.size()), yb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_f16(x[i]);
      hc.run(0, xb.data(), B, n, H, enc, yb.data());
      kv::KVContext ctx;
      ctx.head_dim = D;
      const auto codec = kv::make_codec(spec, key ? kv::Side::Key : kv::Side::Value, ctx);
      const auto q = randn(D, 93);
      std::vector<float> qd(codec->domain_dim()), dom(codec->domain_dim()), rec(D);
      std::vector<uint8_t> code(codec->group_bytes());
      codec->query_to_domain(q.data(), qd.data());
      double worst = 0;
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h)
          for (int t = 0; t < n; ++t) {
            const size_t row = (size_t(b) * n + t) * H * D + size_t(h) * D;
            if (t >= enc) {
              for (int d = 0; d < D; ++d) ASSERT_EQ(yb[row + d], xb[row + d]) << m;
              continue;
            }
            std::fill(code.begin(), code.end(), 0);
            codec->encode_tokens_at(&x[row], 1, t, code.data());
            codec->decode(code.data(), 0, 1, dom.data());
            double want = 0, got = 0, scale = 0;
            if (key) {
              for (size_t i = 0; i < qd.size(); ++i) want += double(qd[i]) * dom[i];
              for (int d = 0; d < D; ++d)
                got += double(q[d]) * f16_to_f32(yb[row + d]), scale += std::abs(q[d] * x[row + d]);
            } else {
              codec->reconstruct(code.data(), 0, rec.data());
              for (int d = 0; d < D; ++d) want += std::abs(rec[d] - f16_to_f32(yb[row + d])), scale += std::abs(rec[d]);
            }
            worst = std::max(worst, std::abs(got - want) / scale);
          }
      std::printf("host codec %-32s %s: head space vs domain, worst %.2e\n", m, key ? "keys  " : "values", worst);
      EXPECT_LT(worst, 1e-3) << m << (key ? " keys" : " values") << ": about an f16 rounding (2^-11) of the terms";
    }
}

// Every method without tables, and native parameters the kernels lack (rot= on affine,
// turboquant_mse rot=dense), alone, with windows (banded and whole decode windows), and beside a
// native kind on the other side.
TEST(Cuda, KvHostCodecAttentionMatchesCpuQuantCache) {
  QT_REQUIRE_GPU();
  const Layer L = layer_data(0);
  const auto exact = cpu_attention(config("f16", "f16", kv::KVMode::Cache), L, 0);
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"turboquant_prod:bits=3", "turboquant_prod:bits=3"},
      {"turboquant_prod:bits=2,r=48", "rvq:bits=1"},
      {"qjl:bits=2", "qjl:bits=2,r=16"},
      {"rvq:bits=2", "rvq:bits=2,r=32"},
      {"polar:bits=4", "polar:bits=3,r=128"},
      {"rabitq:bits=2", "rabitq:bits=2,r=40"},
      {"affine:bits=4,rot=wht", "affine:bits=3,qjl=1,rot=qr"},
      {"turboquant_mse:bits=3,rot=dense", "f16"},
      {"kivi:bits=2", "qjl:bits=1"},
      {"rabitq:bits=1,r=64", "turboquant_mse:bits=2"},
  };
  for (auto mode : {kv::KVMode::Cache, kv::KVMode::Decode})
    for (auto& [k, v] : methods) expect_matches(config(k, v, mode), L, 0, exact);
}

// The calibrated methods: tables per layer, side and kv head trained here (calibrate's
// train_kv_codebooks) on rows like the test's; both layers, so each reads its own layer's tables.
TEST(Cuda, KvHostCodecCalibratedMatchesCpuQuantCache) {
  QT_REQUIRE_GPU();
  const std::string dir = test::temp_dir("cuda-kvhost");
  calib::KvSamples s;
  s.layers = kLayers, s.heads = nkv, s.dim = D, s.n = 2048, s.ctx = 256, s.rope_inv_freq = inv_freq();
  s.k.resize(kLayers * nkv), s.v.resize(kLayers * nkv);
  for (int i = 0; i < kLayers * nkv; ++i)
    s.k[size_t(i)] = kv_rows(2048, 61 + i), s.v[size_t(i)] = kv_rows(2048, 71 + i);
  for (const char* m : {"vecinfer:bits=2", "spectral:bits=3", "commvq:bits=1"}) {
    const kv::KVSpec spec = kv::parse_kv_spec(m, "test");
    const bool commvq = spec.method == "commvq";
    const std::string prefix =
        kv::calibrated_prefix(commvq ? kv::commvq_table_method(8, true) : spec.method, spec.number("bits", 0, "t"));
    calib::write_calibrated_artifacts(dir, prefix, calib::train_kv_codebooks(s, spec, 42, commvq ? 1 : 3, nullptr, {}),
                                      D, 42, {});
  }
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"vecinfer:bits=2", "vecinfer:bits=2,r=32"},
      {"spectral:bits=3,r=16", "spectral:bits=3"},
      {"commvq:bits=1", "f16"},
      {"commvq:bits=1,r=24", "vecinfer:bits=2"},
  };
  for (int layer = 0; layer < kLayers; ++layer) {
    const Layer L = layer_data(layer);
    const auto exact = cpu_attention(config("f16", "f16", kv::KVMode::Cache), L, layer);
    for (auto mode : {kv::KVMode::Cache, kv::KVMode::Decode})
      for (auto& [k, v] : methods) expect_matches(config(k, v, mode, dir), L, layer, exact);
  }
}

// The whole forward: eval-ppl on the tiny llama (head_dim 8) through host-codec methods against the
// CPU's bf16 path with the same cache, held to what bf16 does to the CPU's own PPL with that cache
// (its bf16 against its f32 path), as the native kinds' TinyLlamaQuantizedKvMatchesCpu.
TEST(Cuda, TinyLlamaHostCodecKvMatchesCpu) {
  QT_REQUIRE_GPU();
  const auto ids = random_ids(5 * 32, 13);
  Checkpoint a = load_checkpoint(tiny_dir());
  LlamaModel cbf(a, Compute::BF16), c32(a, Compute::F32);
  cuda::GpuModel gpu(load_checkpoint(tiny_dir()));
  auto cfg = [&](const std::string& m, kv::KVMode mode) {
    kv::KVConfig c = kv::uniform_kv_config(a.config.n_layers, kv::parse_kv_spec(m, "k"), kv::parse_kv_spec(m, "v"));
    c.mode = mode;
    return c;
  };
  for (auto mode : {kv::KVMode::Cache, kv::KVMode::Decode})
    for (const std::string m : {"qjl:bits=2", "rvq:bits=2,r=8", "turboquant_prod:bits=3"}) {
      PplOptions po;
      po.ctx = 32;
      po.bos_id = 1;
      po.kv = cfg(m, mode);
      const PplResult want = evaluate_perplexity(cbf, ids, po);
      PplOptions pf = po;
      pf.kv = cfg("f16", mode);
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

}  // namespace
}  // namespace qt
