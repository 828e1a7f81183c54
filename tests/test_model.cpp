// The forward pass and its kernels.
//  * ops (exp, RMSNorm, RoPE, SwiGLU, row statistics, KL row) at every kernel level against
//    double-precision formulas;
//  * attention through the f32 KV cache at every kernel level against the scalar reference
//    (ops::attention_ref), on ragged shapes, GQA groups, and appends in pieces; the fp16 cache
//    (halves widened in the tiles) bit for bit the f32 cache of fp16-rounded values;
//  * SmolLM2-135M (the real Q4_1 GGUF) logits on the first 512 tokens of wiki.test.raw against
//    transformers' fp32 logits (tests/golden/make_logits_golden.py): max |Δlogit| ≤ 1e-3, mean
//    NLL within 1e-5 relative — in one batch, in pieces through the cache, and in bf16;
//  * tiny random llama (llama3 RoPE scaling, GQA, untied head), qwen2 (q/k/v bias) and qwen3
//    (q/k norm, head_dim ≠ hidden/heads) models against transformers' logits.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/error.h"
#include "libquant/cpu_features.h"
#include "libquant/eval/perplexity.h"
#include "libquant/kv/cache.h"
#include "libquant/model/llama.h"
#include "libquant/math/ops.h"
#include "tests/support.h"

namespace qt {
namespace {

using nlohmann::json;

// Runs the body at every kernel level this CPU has, restoring the level afterwards.
template <typename F>
void at_every_level(F&& body) {
  const KernelLevel saved = kernel_level();
  for (KernelLevel lvl : available_kernel_levels()) {
    set_kernel_level(lvl);
    SCOPED_TRACE(kernel_level_name(lvl));
    body(lvl);
  }
  set_kernel_level(saved);
}

json load_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

// ------------------------------------------------------------------------------------- ops

TEST(Ops, ExpMatchesLibm) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.01237f) x.push_back(v);
  at_every_level([&](KernelLevel) {
    std::vector<float> y = x;
    ops::exp_inplace(y.data(), int64_t(y.size()));
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = std::exp(double(x[i]));
      worst = std::max(worst, std::abs(y[i] - e) / e);
    }
    EXPECT_LT(worst, 4e-7);
  });
}

TEST(Ops, RmsNormSwiGluMatchFormulas) {
  const int rows = 5, dim = 77;  // ragged: not a multiple of any vector width
  auto x = test::randn(rows * dim, 1, 3.0f), w = test::randn(dim, 2), u = test::randn(rows * dim, 3);
  at_every_level([&](KernelLevel) {
    std::vector<float> y(rows * dim), s(rows * dim);
    ops::rmsnorm(x.data(), dim, w.data(), y.data(), dim, rows, dim, 1e-5f);
    ops::swiglu(x.data(), u.data(), s.data(), rows, dim);
    for (int r = 0; r < rows; ++r) {
      double ss = 0;
      for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int i = 0; i < dim; ++i) {
        const double g = x[r * dim + i];
        EXPECT_NEAR(y[r * dim + i], w[i] * g * inv, 2e-6 * (1 + std::abs(w[i] * g * inv)));
        const double sw = g / (1 + std::exp(-g)) * u[r * dim + i];
        EXPECT_NEAR(s[r * dim + i], sw, 1e-6 * (1 + std::abs(sw)));
      }
    }
  });
}

TEST(Ops, RopeIsRotateHalf) {
  ModelConfig c;
  c.head_dim = 40;  // half = 20: a vector and a scalar tail at every width
  c.rope_theta = 10000.0f;
  ops::RopeTable t(c);
  t.ensure(300);
  const int heads = 3, rows = 4, pos0 = 290;
  auto x = test::randn(rows * heads * 40, 4);
  at_every_level([&](KernelLevel) {
    std::vector<float> y = x;
    ops::rope(y.data(), heads * 40, rows, heads, 40, pos0, t);
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < 20; ++i) {
          // angle as transformers computes it: float32 inv_freq, float32 product
          const float inv = 1.0f / std::pow(10000.0f, float(2 * i) / 40.0f);
          const double a = double(float(pos0 + r) * inv);
          const float* xr = &x[(r * heads + h) * 40];
          const double e0 = xr[i] * std::cos(a) - xr[i + 20] * std::sin(a);
          const double e1 = xr[i + 20] * std::cos(a) + xr[i] * std::sin(a);
          EXPECT_NEAR(y[(r * heads + h) * 40 + i], e0, 1e-5);
          EXPECT_NEAR(y[(r * heads + h) * 40 + i + 20], e1, 1e-5);
        }
  });
}

TEST(Ops, RowStatsAndKlMatchDouble) {
  const int n = 1001;
  auto a = test::randn(n, 5, 4.0f), b = test::randn(n, 6, 4.0f);
  for (int i = 0; i < n; ++i) b[i] = a[i] + 0.3f * b[i] / 4.0f;  // a nearby distribution
  a[517] = 30.0f;                                                // the argmax, away from the start
  double mx = -1e30;
  for (float v : a) mx = std::max(mx, double(v));
  auto lse = [&](const std::vector<float>& l) {
    double m = *std::max_element(l.begin(), l.end()), s = 0;
    for (float v : l) s += std::exp(v - m);
    return m + std::log(s);
  };
  const double la = lse(a), lb = lse(b);
  double kl = 0;
  for (int i = 0; i < n; ++i) kl += std::exp(a[i] - la) * ((a[i] - la) - (b[i] - lb));
  at_every_level([&](KernelLevel) {
    ops::RowStats s = ops::row_stats(a.data(), n);
    EXPECT_EQ(s.argmax, 517);
    EXPECT_EQ(s.max, 30.0f);
    EXPECT_NEAR(s.lse, la, 1e-6);
    const double k = ops::kl_row(a.data(), la, b.data(), lb, n);
    EXPECT_NEAR(k, kl, 1e-6 * std::abs(kl) + 1e-9);
  });
}

// ------------------------------------------------------------------------------- attention

struct AttnCase {
  int n_heads, n_kv_heads, head_dim, first_pos, n_q, pieces;
};

TEST(Attention, CacheMatchesScalarReference) {
  const AttnCase cases[] = {
      {9, 3, 64, 0, 37, 1}, {9, 3, 64, 0, 130, 3}, {4, 4, 32, 10, 1, 1}, {8, 2, 128, 50, 13, 2},
      {6, 1, 16, 0, 7, 1},  {2, 2, 24, 3, 29, 2},  {3, 3, 6, 0, 9, 1},   {2, 1, 80, 0, 70, 4},
  };
  for (const AttnCase& tc : cases) {
    SCOPED_TRACE(::testing::Message() << tc.n_heads << "/" << tc.n_kv_heads << " heads, d " << tc.head_dim << ", pos "
                                      << tc.first_pos << " + " << tc.n_q);
    const int total = tc.first_pos + tc.n_q, D = tc.head_dim;
    const int64_t qw = int64_t(tc.n_heads) * D, kw = int64_t(tc.n_kv_heads) * D;
    auto k = test::randn(total * kw, 11), v = test::randn(total * kw, 12), q = test::randn(tc.n_q * qw, 13, 2.0f);
    KVShape s{1, tc.n_heads, tc.n_kv_heads, D, total + 5, 1.0f / std::sqrt(float(D))};
    // The reference reads the same layout from plain arrays.
    const int64_t cap = total;
    std::vector<float> blocks(size_t(tc.n_kv_heads) * 2 * cap * D);
    for (int h = 0; h < tc.n_kv_heads; ++h)
      for (int j = 0; j < total; ++j)
        for (int d = 0; d < D; ++d) {
          blocks[(h * 2 * cap) * D + d * cap + j] = k[j * kw + h * D + d];
          blocks[(h * 2 * cap + cap) * D + j * D + d] = v[j * kw + h * D + d];
        }
    ops::AttnLayout ref_layout{blocks.data(), blocks.data() + cap * D, cap, D, 2 * cap * D};
    std::vector<float> want(tc.n_q * qw);
    ops::attention_ref(q.data(), qw, tc.n_q, tc.first_pos, tc.n_heads, tc.n_kv_heads, D, s.scale, ref_layout,
                       want.data(), qw);
    at_every_level([&](KernelLevel) {
      auto cache = make_kv_cache("f32", s);
      // Fill twice: the second sequence must not see the first (clear()).
      for (int round = 0; round < 2; ++round) {
        cache->clear();
        int done = 0;
        for (int p = 0; p < tc.pieces; ++p) {
          const int n = (p + 1 == tc.pieces) ? total - done : total / tc.pieces;
          const float* kk = round ? k.data() : v.data();  // round 0: different data
          cache->append(0, kk + done * kw, v.data() + done * kw, n, done);
          done += n;
        }
      }
      ASSERT_EQ(cache->size(0), total);
      std::vector<float> got(tc.n_q * qw, -1.0f);
      cache->attend(0, q.data(), tc.n_q, tc.first_pos, got.data());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
      EXPECT_LT(worst, 1e-5);
    });
  }
}

// The fp16 cache stores halves and widens them in the tiles: bit for bit the f32 cache holding
// the fp16-rounded values, at every level (head_dim 6 takes the scalar reference's f16 path).
TEST(Attention, Fp16CacheEqualsF32CacheOfRoundedValues) {
  const AttnCase cases[] = {{9, 3, 64, 0, 130, 3}, {4, 4, 32, 10, 1, 1}, {8, 2, 128, 50, 13, 2}, {3, 3, 6, 0, 9, 1}};
  for (const AttnCase& tc : cases) {
    SCOPED_TRACE(::testing::Message() << tc.n_heads << " heads, d " << tc.head_dim << ", pos " << tc.first_pos);
    const int total = tc.first_pos + tc.n_q, D = tc.head_dim;
    const int64_t qw = int64_t(tc.n_heads) * D, kw = int64_t(tc.n_kv_heads) * D;
    auto k = test::randn(total * kw, 21, 30.0f), v = test::randn(total * kw, 22, 30.0f),
         q = test::randn(tc.n_q * qw, 23, 0.1f);
    std::vector<float> kr(k.size()), vr(v.size());
    for (size_t i = 0; i < k.size(); ++i) kr[i] = f16_to_f32(f32_to_f16(k[i])), vr[i] = f16_to_f32(f32_to_f16(v[i]));
    KVShape s{1, tc.n_heads, tc.n_kv_heads, D, total, 1.0f / std::sqrt(float(D))};
    at_every_level([&](KernelLevel) {
      auto f16 = make_kv_cache("f16", s), f32 = make_kv_cache("f32", s);
      const int n0 = total / tc.pieces;
      f16->append(0, k.data(), v.data(), n0, 0);
      f16->append(0, k.data() + n0 * kw, v.data() + n0 * kw, total - n0, n0);
      f32->append(0, kr.data(), vr.data(), total, 0);
      std::vector<float> a(tc.n_q * qw), b(tc.n_q * qw);
      f16->attend(0, q.data(), tc.n_q, tc.first_pos, a.data());
      f32->attend(0, q.data(), tc.n_q, tc.first_pos, b.data());
      int differ = 0;
      for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
      EXPECT_EQ(differ, 0);
      EXPECT_EQ(f16->bytes_per_token(), 2 * 2 * tc.n_kv_heads * D);  // 2 bytes a value, K and V
    });
  }
}

TEST(Attention, CacheRefusesOutOfOrderAppend) {
  KVShape s{2, 2, 1, 8, 16, 0.35f};
  auto cache = make_kv_cache("f32", s);
  std::vector<float> kv(8 * 4);
  cache->append(0, kv.data(), kv.data(), 4, 0);
  EXPECT_THROW(cache->append(0, kv.data(), kv.data(), 1, 5), UserError);   // gap
  EXPECT_THROW(cache->append(1, kv.data(), kv.data(), 17, 0), UserError);  // past capacity
  EXPECT_THROW(make_kv_cache("nope", s), UserError);
}

// ------------------------------------------------------------------ SmolLM2 vs transformers

struct Golden {
  json j;
  std::vector<int32_t> ids;
};

Golden smollm_golden() {
  Golden g;
  g.j = load_json(test::source_dir() + "/tests/golden/logits/smollm2_q4_1_wiki512.json");
  g.ids = g.j["ids"].get<std::vector<int32_t>>();
  return g;
}

struct Diff {
  double max_abs = 0;  // over every logit the golden holds
  double mean_nll = 0;
  double max_logit_sum_err = 0;  // |Δ Σ_v logit| / vocab
  int top1_mismatch = 0;
};

// Compares logits of positions [p0, p0+rows) with the golden (only what it holds there).
Diff compare(const Golden& g, const float* logits, int p0, int rows, int V) {
  Diff d;
  auto upd = [&](double a, double b) { d.max_abs = std::max(d.max_abs, std::abs(a - b)); };
  auto at = [&](int p, int v) { return double(logits[size_t(p - p0) * V + v]); };
  for (int p = p0; p < p0 + rows; ++p) {
    ops::RowStats st = ops::row_stats(logits + size_t(p - p0) * V, V);
    upd(st.max, g.j["max_logit"][p].get<double>());
    upd(st.lse, g.j["lse"][p].get<double>());
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += at(p, v);
    d.max_logit_sum_err = std::max(d.max_logit_sum_err, std::abs(sum - g.j["logit_sum"][p].get<double>()) / V);
  }
  for (auto& t : g.j["top5"]) {
    int p = t["pos"];
    if (p < p0 || p >= p0 + rows) continue;
    for (int i = 0; i < 5; ++i) upd(at(p, t["ids"][i]), t["logits"][i].get<double>());
    if (ops::row_stats(logits + size_t(p - p0) * V, V).argmax != t["ids"][0]) ++d.top1_mismatch;
  }
  for (auto& s : g.j["samples"]) {
    int p = s[0];
    if (p >= p0 && p < p0 + rows) upd(at(p, s[1]), s[2].get<double>());
  }
  double nll = 0;
  int n = 0;
  for (int p = p0; p < p0 + rows && p + 1 < int(g.ids.size()); ++p, ++n) {
    ops::RowStats st = ops::row_stats(logits + size_t(p - p0) * V, V);
    nll += st.lse - at(p, g.ids[p + 1]);
  }
  d.mean_nll = n ? nll / n : 0;
  return d;
}

double golden_mean_nll(const Golden& g, int p0, int rows) {
  double s = 0;
  int n = 0;
  for (int p = p0; p < p0 + rows && p < 511; ++p, ++n) s += g.j["nll"][p].get<double>();
  return s / n;
}

class SmolLM : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(test::model_gguf())) return;
    ck_ = new Checkpoint(load_checkpoint(test::model_gguf()));
  }
  static void TearDownTestSuite() {
    delete ck_;
    ck_ = nullptr;
  }
  static Checkpoint* ck_;
};
Checkpoint* SmolLM::ck_ = nullptr;

TEST_F(SmolLM, LogitsMatchTransformersFp32) {
  QT_REQUIRE_FILE(test::model_gguf());
  const Golden g = smollm_golden();
  ASSERT_EQ(g.ids.size(), 512u);
  const int V = ck_->config.vocab;
  ASSERT_EQ(V, g.j["vocab"].get<int>());
  const KernelLevel saved = kernel_level();
  for (KernelLevel lvl : available_kernel_levels()) {
    set_kernel_level(lvl);
    SCOPED_TRACE(kernel_level_name(lvl));
    // The scalar GEMM is the slow spec: a 48-token prefix is enough to check it.
    const int n = lvl == KernelLevel::Scalar ? 48 : 512;
    LlamaModel m(*ck_, Compute::F32);
    auto cache = m.make_cache(512);
    std::vector<float> logits(size_t(n) * V);
    m.forward(g.ids.data(), n, 0, *cache, 0, n, logits.data());
    Diff d = compare(g, logits.data(), 0, n, V);
    const double want = golden_mean_nll(g, 0, n);
    EXPECT_LE(d.max_abs, 1e-3);
    EXPECT_LE(d.max_logit_sum_err, 1e-4);
    EXPECT_EQ(d.top1_mismatch, 0);
    EXPECT_NEAR(d.mean_nll, want, 1e-5 * want);
    if (n == 512) {
      EXPECT_NEAR(want, g.j["mean_nll"].get<double>(), 1e-12);
    }
    std::printf("[%s] max |dlogit| %.2e, mean NLL %.8f vs %.8f (rel %.1e)\n", kernel_level_name(lvl), d.max_abs,
                d.mean_nll, want, std::abs(d.mean_nll - want) / want);
  }
  set_kernel_level(saved);
}

// Three forward calls (positions 0-199, 200, 201-511) through the cache give the same logits.
TEST_F(SmolLM, IncrementalForwardMatchesTransformers) {
  QT_REQUIRE_FILE(test::model_gguf());
  const Golden g = smollm_golden();
  const int V = ck_->config.vocab;
  LlamaModel m(*ck_, Compute::F32);
  auto cache = m.make_cache(512);
  std::vector<float> logits(size_t(311) * V);
  m.forward(g.ids.data(), 200, 0, *cache, 0, 0, nullptr);  // no output rows
  m.forward(g.ids.data() + 200, 1, 200, *cache, 0, 1, logits.data());
  Diff d1 = compare(g, logits.data(), 200, 1, V);
  m.forward(g.ids.data() + 201, 311, 201, *cache, 0, 311, logits.data());
  Diff d2 = compare(g, logits.data(), 201, 311, V);
  EXPECT_LE(d1.max_abs, 1e-3);
  EXPECT_LE(d2.max_abs, 1e-3);
  const double want = golden_mean_nll(g, 201, 311);
  EXPECT_NEAR(d2.mean_nll, want, 1e-5 * want);
}

// The form of the check: the Hugging Face folder `quanttool convert --dtype f32` writes
// from the GGUF, loaded back (safetensors path), gives transformers' logits.
TEST_F(SmolLM, HfFolderFromConvertMatchesTransformers) {
  QT_REQUIRE_FILE(test::model_gguf());
  const Golden g = smollm_golden();
  const std::string dir = test::temp_dir("model-hf") + "/hf";
  std::string out;
  ASSERT_EQ(test::run_cmd(
                test::quanttool_bin() + " convert --in " + test::model_gguf() + " --out " + dir + " --dtype f32", &out),
            0)
      << out;
  {
    Checkpoint hf = load_checkpoint(dir);
    EXPECT_EQ(hf.source_kind, "hf");
    const int V = hf.config.vocab, n = 512;
    LlamaModel m(hf, Compute::F32);
    auto cache = m.make_cache(n);
    std::vector<float> logits(size_t(n) * V);
    m.forward(g.ids.data(), n, 0, *cache, 0, n, logits.data());
    Diff d = compare(g, logits.data(), 0, n, V);
    EXPECT_LE(d.max_abs, 1e-3);
    const double want = g.j["mean_nll"].get<double>();
    EXPECT_NEAR(d.mean_nll, want, 1e-5 * want);
    std::printf("hf folder: max |dlogit| %.2e, mean NLL %.8f vs %.8f\n", d.max_abs, d.mean_nll, want);
  }
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}

// Packed weights: `convert --scheme affine --bits 4 --group-size 64` writes the mlx folder, and our
// forward from its packed codes (no dequantized copy) gives mlx_lm's logits on the same weights
// (golden: tests/golden/make_mlx_logits_golden.py, mlx_lm quantizing transformers' load of the GGUF).
TEST_F(SmolLM, MlxAffine4FolderMatchesMlxLm) {
  QT_REQUIRE_FILE(test::model_gguf());
  const json g = load_json(test::source_dir() + "/tests/golden/logits/smollm2_mlx_affine4_g64.json");
  const std::string dir = test::temp_dir("model-mlx") + "/q4";
  std::string out;
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + test::model_gguf() + " --out " + dir +
                              " --scheme affine --bits 4 --group-size 64",
                          &out),
            0)
      << out;
  const std::vector<int32_t> ids = g["ids"].get<std::vector<int32_t>>();
  const int n = int(ids.size());
  for (KernelLevel lvl : {KernelLevel::AVX2, max_kernel_level()}) {
    if (lvl > max_kernel_level()) continue;
    set_kernel_level(lvl);
    Checkpoint ck = load_checkpoint(dir);
    ASSERT_EQ(ck.source_kind, "mlx");
    const int V = ck.config.vocab;
    LlamaModel m(std::move(ck), checkpoint_linear_factory(ck, {}));
    EXPECT_EQ(m.linear_kind(), "affine4-g64");
    auto cache = m.make_cache(n);
    std::vector<float> logits(size_t(n) * V);
    m.forward(ids.data(), n, 0, *cache, 0, n, logits.data());
    double worst = 0;
    for (int p = 0; p < n; ++p) {
      const float* row = logits.data() + size_t(p) * V;
      const int64_t am = std::max_element(row, row + V) - row;
      EXPECT_EQ(am, g["argmax"][p].get<int64_t>()) << "position " << p;
      worst = std::max(worst, std::abs(double(row[am]) - g["max_logit"][p].get<double>()));
    }
    for (auto& [pos, t] : g["top5"].items())
      for (int i = 0; i < 5; ++i) {
        const int p = std::stoi(pos);
        worst = std::max(
            worst, std::abs(double(logits[size_t(p) * V + t["ids"][i].get<int64_t>()]) - t["values"][i].get<double>()));
      }
    for (auto& s : g["samples"])
      worst = std::max(
          worst, std::abs(double(logits[size_t(s[0].get<int>()) * V + s[1].get<int64_t>()]) - s[2].get<double>()));
    EXPECT_LT(worst, 1e-2) << kernel_level_name(lvl);
    std::printf("[%s] mlx affine4-g64 folder vs mlx_lm: max |dlogit| %.2e\n", kernel_level_name(lvl), worst);
  }
  set_kernel_level(max_kernel_level());
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}

// bf16 weights and activations: not the fp32 reference any more, but close to it.
TEST_F(SmolLM, Bf16StaysCloseToFp32) {
  QT_REQUIRE_FILE(test::model_gguf());
  const Golden g = smollm_golden();
  const int V = ck_->config.vocab, n = 256;
  LlamaModel m(*ck_, Compute::BF16);
  EXPECT_EQ(m.linear_kind(), "bf16");
  auto cache = m.make_cache(n);
  std::vector<float> logits(size_t(n) * V);
  m.forward(g.ids.data(), n, 0, *cache, 0, n, logits.data());
  Diff d = compare(g, logits.data(), 0, n, V);
  const double want = golden_mean_nll(g, 0, n);
  std::printf("bf16: max |dlogit| %.3f, mean NLL %.6f vs %.6f\n", d.max_abs, d.mean_nll, want);
  EXPECT_NEAR(d.mean_nll, want, 0.01 * want);
  EXPECT_LT(d.max_abs, 0.5);
  EXPECT_GT(d.max_abs, 1e-4);  // it really computed in bf16
}

// ------------------------------------------------------------- tiny models vs transformers

class TinyModel : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyModel, LogitsMatchTransformers) {
  const std::string dir = test::source_dir() + "/tests/golden/logits/tiny-" + GetParam();
  const json g = load_json(dir + "/logits.json");
  Checkpoint ck = load_checkpoint(dir);
  EXPECT_EQ(ck.config.arch, g["arch"].get<std::string>());
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  const auto want = g["logits"].get<std::vector<float>>();
  const int n = int(ids.size()), V = ck.config.vocab;
  ASSERT_EQ(want.size(), size_t(n) * V);
  at_every_level([&](KernelLevel) {
    LlamaModel m(ck, Compute::F32);
    auto cache = m.make_cache(n);
    std::vector<float> got(size_t(n) * V);
    // Two pieces: exercises positions > 0 in RoPE and the cache.
    m.forward(ids.data(), 5, 0, *cache, 0, 5, got.data());
    m.forward(ids.data() + 5, n - 5, 5, *cache, 0, n - 5, got.data() + size_t(5) * V);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
    EXPECT_LT(worst, 1e-4);
  });
}

INSTANTIATE_TEST_SUITE_P(Archs, TinyModel,
                         ::testing::Values("llama3", "qwen2", "qwen3", "gemma2", "gemma3", "falcon3", "phi3", "olmo2",
                                           "smollm3"));

// ------------------------------------------------ Gemma: sliding window, soft-caps, KV methods
// tests/golden/make_arch_logits_golden.py: 16 tokens, windows of 4 (gemma2) and 5 (gemma3).

struct TinyGolden {
  Checkpoint ck;
  std::vector<int32_t> ids;
  std::vector<float> logits;
};
TinyGolden tiny_golden(const std::string& name) {
  const std::string dir = test::source_dir() + "/tests/golden/logits/tiny-" + name;
  const json g = load_json(dir + "/logits.json");
  return {load_checkpoint(dir), g["ids"].get<std::vector<int32_t>>(), g["logits"].get<std::vector<float>>()};
}
// The logits of `ck` on ids (one token at a time when `one_by_one`) with KV method `kv`.
std::vector<float> tiny_logits(const Checkpoint& ck, const std::vector<int32_t>& ids, const std::string& kv,
                               bool one_by_one) {
  LlamaModel m(ck, Compute::F32);
  const int n = int(ids.size()), V = ck.config.vocab;
  auto cache = m.make_cache(n, kv);
  std::vector<float> got(size_t(n) * V);
  if (one_by_one) {
    for (int i = 0; i < n; ++i) m.forward(&ids[i], 1, i, *cache, 0, 1, got.data() + size_t(i) * V);
  } else {
    m.forward(ids.data(), n, 0, *cache, 0, n, got.data());
  }
  return got;
}
using test::max_abs_diff;
double worst_diff(const Checkpoint& ck, const std::vector<int32_t>& ids, const std::vector<float>& want,
                  const std::string& kv = "f32", bool one_by_one = false) {
  return max_abs_diff(tiny_logits(ck, ids, kv, one_by_one), want);
}

class TinyGemma : public ::testing::TestWithParam<std::string> {};

// Token by token through the cache (the decode path, sliding past the window) = transformers.
TEST_P(TinyGemma, OneTokenAtATimeMatchesTransformers) {
  TinyGolden g = tiny_golden(GetParam());
  EXPECT_LT(worst_diff(g.ck, g.ids, g.logits, "f32", true), 1e-4);
}

// Each Gemma feature changes the logits well beyond the 1e-4 bar: the golden tests see them.
TEST_P(TinyGemma, FeaturesMatter) {
  TinyGolden g = tiny_golden(GetParam());
  ModelConfig& c = g.ck.config;
  ASSERT_GT(int(g.ids.size()), c.sliding_window + 4);  // the sequence outgrows the window
  {
    TinyGolden h = tiny_golden(GetParam());
    h.ck.config.sliding.clear();  // every layer global
    EXPECT_GT(worst_diff(h.ck, h.ids, h.logits), 1e-2) << "sliding window";
  }
  if (c.attn_softcap > 0) {
    TinyGolden h = tiny_golden(GetParam());
    h.ck.config.attn_softcap = 0;
    EXPECT_GT(worst_diff(h.ck, h.ids, h.logits), 1e-2) << "attention soft-cap";
  }
  if (c.final_softcap > 0) {
    TinyGolden h = tiny_golden(GetParam());
    h.ck.config.final_softcap = 0;
    EXPECT_GT(worst_diff(h.ck, h.ids, h.logits), 1e-2) << "final soft-cap";
  }
  if (c.rope_local_theta > 0) {
    TinyGolden h = tiny_golden(GetParam());
    h.ck.config.rope_local_theta = c.rope_theta;
    EXPECT_GT(worst_diff(h.ck, h.ids, h.logits), 1e-3) << "local RoPE base";
  }
  {
    TinyGolden h = tiny_golden(GetParam());
    h.ck.config.query_pre_attn_scalar = float(c.head_dim) * 2;
    EXPECT_GT(worst_diff(h.ck, h.ids, h.logits), 1e-2) << "query_pre_attn_scalar";
  }
}

// The KV methods at head_dim 256 on the sliding-window / soft-capped layers. The quantized
// cache applies both itself (quant_cache.cpp): with a full-precision window holding every token
// (r=64, values kept in fp16 as the f16 cache keeps them) it must give the f16 cache's logits
// within 5e-4 (its own summation order: 1.3e-4 apart on the unmasked tiny-falcon3 as well; the
// window ignored moves them by > 1e-2, FeaturesMatter), in a batch and token by token; f16 stays within 2e-3 of transformers' fp32, 8-bit
// methods within 0.05. Low-bit methods on these random (unstructured)
// keys only have to run and stay finite: their error is the method's, not the architecture's.
TEST_P(TinyGemma, KvMethodsAtHeadDim256) {
  TinyGolden g = tiny_golden(GetParam());
  ASSERT_EQ(g.ck.config.head_dim, 256);
  const std::vector<float> f16 = tiny_logits(g.ck, g.ids, "f16", false);
  EXPECT_LT(max_abs_diff(f16, g.logits), 2e-3);
  EXPECT_LT(worst_diff(g.ck, g.ids, f16, "kivi:bits=2,r=64"), 5e-4);
  EXPECT_LT(worst_diff(g.ck, g.ids, f16, "turboquant_mse:bits=3,r=64", true), 5e-4);
  EXPECT_LT(worst_diff(g.ck, g.ids, g.logits, "affine:bits=8"), 0.05);
  EXPECT_LT(worst_diff(g.ck, g.ids, g.logits, "kivi:bits=8"), 0.05);
  EXPECT_LT(worst_diff(g.ck, g.ids, g.logits, "affine:bits=8", true), 0.05);
  for (const char* kv : {"kivi:bits=2", "turboquant_mse:bits=3", "turboquant_prod:bits=3", "qjl:bits=2", "rvq:bits=2",
                         "polar:bits=4", "rabitq:bits=2"}) {
    SCOPED_TRACE(kv);
    EXPECT_TRUE(std::isfinite(worst_diff(g.ck, g.ids, g.logits, kv)));
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, TinyGemma, ::testing::Values("gemma2", "gemma3"));

// eval-ppl's evaluation at ctx 8 (chunks longer than the windows of 4 and 5) = the mean NLL of
// transformers' logits on the same chunks (ppl_chunks_ctx8), whole chunks and in ubatches of 3.
class TinyPpl : public ::testing::TestWithParam<std::string> {};
TEST_P(TinyPpl, ChunksLongerThanTheWindowMatchTransformers) {
  const std::string dir = test::source_dir() + "/tests/golden/logits/tiny-" + GetParam();
  const json g = load_json(dir + "/logits.json");
  Checkpoint ck = load_checkpoint(dir);
  LlamaModel m(ck, Compute::F32);
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  for (int ubatch : {0, 3}) {
    SCOPED_TRACE(ubatch);
    PplOptions o;
    o.method = PplMethod::Chunks;
    o.ctx = 8;
    o.ubatch = ubatch;
    PplResult r = evaluate_perplexity(m, ids, o);
    EXPECT_EQ(r.tokens_scored, 14);
    EXPECT_NEAR(r.mean_nll, g["ppl_chunks_ctx8"].get<double>(), 1e-5);
  }
}
INSTANTIATE_TEST_SUITE_P(Archs, TinyPpl, ::testing::Values("gemma2", "gemma3", "falcon3", "phi3", "olmo2", "smollm3"));

// Phi-3: the fused tensors split at load into views of the file's rows; the sliding window
// (6 here) matters, token by token too (the batch path runs single tokens of windowed models).
TEST(TinyPhi3, SplitAtLoadAndWindowed) {
  TinyGolden g = tiny_golden("phi3");
  const ModelConfig& c = g.ck.config;
  EXPECT_TRUE(c.desc().fused_proj);
  EXPECT_TRUE(g.ck.has("model.layers.1.self_attn.k_proj.weight"));
  EXPECT_TRUE(g.ck.has("model.layers.1.mlp.up_proj.weight"));
  EXPECT_FALSE(g.ck.has("model.layers.1.self_attn.qkv_proj.weight"));
  EXPECT_EQ(g.ck.get("model.layers.0.self_attn.k_proj.weight").shape,
            (std::vector<int64_t>{int64_t(c.n_kv_heads) * c.head_dim, c.hidden}));
  EXPECT_LT(worst_diff(g.ck, g.ids, g.logits, "f32", true), 1e-4);
  g.ck.config.sliding.clear();
  EXPECT_GT(worst_diff(g.ck, g.ids, g.logits), 1e-2);
}

// Architectures that are only a row of formats/arch.h: OLMo 2 (norms after attention and the MLP,
// none before; q/k norm over the whole projection) and SmolLM3 (no RoPE on its second layer).
// Token by token (SmolLM3 through the decode step, OLMo 2's post-norms through the batch path at
// one token), also through the f16 cache (the quantized KV methods need head_dim ≥ 32; these have 8).
class TinyRow : public ::testing::TestWithParam<std::string> {};
TEST_P(TinyRow, OneTokenAtATimeAndF16CacheMatchTransformers) {
  TinyGolden g = tiny_golden(GetParam());
  EXPECT_LT(worst_diff(g.ck, g.ids, g.logits, "f32", true), 1e-4);
  // f16 cache (eval-ppl's default): the decode step and the batch forward see the same rounded K/V
  const std::vector<float> batch = tiny_logits(g.ck, g.ids, "f16", false);
  EXPECT_LT(max_abs_diff(tiny_logits(g.ck, g.ids, "f16", true), batch), 1e-4);
}
INSTANTIATE_TEST_SUITE_P(Archs, TinyRow, ::testing::Values("olmo2", "smollm3"));

TEST(TinySmolLM3, NoRopeLayerMatters) {
  TinyGolden g = tiny_golden("smollm3");
  ASSERT_EQ(g.ck.config.no_rope, (std::vector<uint8_t>{0, 1}));
  g.ck.config.no_rope.clear();  // RoPE on every layer
  EXPECT_GT(worst_diff(g.ck, g.ids, g.logits), 1e-2);
  g.ck.config.no_rope = {1, 1};
  EXPECT_GT(worst_diff(g.ck, g.ids, g.logits), 1e-2);
}

TEST(Model, RefusesUnsupportedArchitecture) {
  Checkpoint ck;
  ck.path = "fake";
  ck.config.arch = "gpt2";
  EXPECT_THROW(LlamaModel(ck, Compute::F32), UserError);
}

}  // namespace
}  // namespace qt
