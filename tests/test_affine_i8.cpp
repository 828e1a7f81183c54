// Affine 4-bit weights against int8 tokens (kernels/affine_i8.h): at every kernel level this CPU
// has, the token quantizer and the GEMM give the scalar spec's bytes and bits; the result is
// within the int8 rounding of the fp32 product; the packed Linear runs it on request; and a tiny
// model's perplexity through it stays close to the default path's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "libquant/cpu_features.h"
#include "libquant/kernels/affine_i8.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

namespace {

using qt::KernelLevel;
using qt::PackedTensor;
using qt::test::randn;
using qt::test::scheme_params;

class AffineI8Levels : public ::testing::TestWithParam<KernelLevel> {
 protected:
  void SetUp() override { qt::set_kernel_level(GetParam()); }
  void TearDown() override { qt::set_kernel_level(qt::max_kernel_level()); }
};

// Tokens with a spread of magnitudes per group (a few large values, as real activations), zero
// groups, and values on rounding ties.
std::vector<float> tokens(int64_t m, int64_t k, uint32_t seed) {
  std::vector<float> x = randn(size_t(m * k), seed);
  for (int64_t i = 0; i < m * k; i += 37) x[size_t(i)] *= 20.0f;
  if (k >= 64)
    for (int64_t j = 32; j < 64; ++j) x[size_t(j)] = 0.0f;  // token 0's second group of 32: all zero
  if (m > 1) {                                              // token 1: 127 and values on half steps
    for (int64_t j = 0; j < k; ++j) x[size_t(k + j)] = j == 0 ? 127.0f : float(j % 9) - 4.5f;
  }
  return x;
}

TEST_P(AffineI8Levels, QuantizerIsTheSpec) {
  for (int64_t g : {32, 64, 128})
    for (bool per_token : {false, true}) {
      const int64_t k = 384, m = 5, ng = k / g;
      const auto x = tokens(m, k, uint32_t(g));
      for (int64_t t = 0; t < m; ++t) {
        std::vector<int8_t> qa(static_cast<size_t>(k)), qb(static_cast<size_t>(k));
        std::vector<float> da(static_cast<size_t>(ng)), db(da), ba(da), bb(da);
        qt::kernels::quantize_token_i8_ref(x.data() + t * k, k, g, per_token, qa.data(), da.data(), ba.data());
        qt::kernels::quantize_token_i8(x.data() + t * k, k, g, per_token, qb.data(), db.data(), bb.data());
        ASSERT_EQ(qa, qb) << "g " << g << " token " << t;
        ASSERT_EQ(0, std::memcmp(da.data(), db.data(), da.size() * 4)) << "g " << g << " token " << t;
        ASSERT_EQ(0, std::memcmp(ba.data(), bb.data(), ba.size() * 4)) << "g " << g << " token " << t;
        for (int64_t gi = 0; gi < ng; ++gi)
          for (int64_t j = gi * g; j < (gi + 1) * g; ++j)
            ASSERT_LE(std::abs(double(x[size_t(t * k + j)]) - double(qa[size_t(j)]) * da[size_t(gi)]),
                      0.5001 * da[size_t(gi)]);
      }
    }
}

struct Case {
  int64_t n, k, g, m;
};

TEST_P(AffineI8Levels, GemmIsTheSpecBitForBit) {
  std::vector<Case> cases;
  for (int64_t g : {32, 64, 128})
    for (int64_t m : {1, 2, 5, 7, 33, 70}) cases.push_back({37, 384, g, m});
  cases.push_back({16, 256, 64, 9});
  cases.push_back({211, 384, 64, 200});  // many tiles on the threads, a tail panel of 3 rows
  cases.push_back({130, 128, 128, 6});
  for (const Case& c : cases)
    for (bool per_token : {false, true})
      for (bool with_bias : {false, true}) {
        PackedTensor pt = qt::quantize_weights(randn(size_t(c.n * c.k), uint32_t(c.n + c.g), 0.05f).data(), c.n, c.k,
                                               scheme_params("affine", 4, int(c.g)));
        const auto sc = qt::to_f32(pt.scales), bi = qt::to_f32(pt.biases);
        const auto bias = randn(size_t(c.n), 3);
        const float* bp = with_bias ? bias.data() : nullptr;
        const auto x = tokens(c.m, c.k, uint32_t(c.m));
        const int64_t ng = c.k / c.g;
        std::vector<int8_t> q(size_t(c.m * c.k));
        std::vector<float> d(size_t(c.m * ng)), bx(size_t(c.m * ng));
        for (int64_t t = 0; t < c.m; ++t)
          qt::kernels::quantize_token_i8_ref(x.data() + t * c.k, c.k, c.g, per_token, q.data() + t * c.k,
                                             d.data() + t * ng, bx.data() + t * ng);
        std::vector<float> want(size_t(c.m * c.n)), got(size_t(c.m * c.n), -1.0f);
        qt::kernels::affine_i8_gemm_ref(pt.data.data, sc.data(), bi.data(), c.n, c.k, c.g, q.data(), d.data(),
                                        bx.data(), c.m, bp, want.data());
        const auto w = qt::kernels::pack_affine_i8(pt.data.data, sc.data(), bi.data(), c.n, c.k, c.g);
        qt::kernels::affine_i8_gemm(w, x.data(), c.m, per_token, bp, got.data());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], want[i]) << "n " << c.n << " k " << c.k << " g " << c.g << " m " << c.m << " per_token "
                                     << per_token << " at " << i;

        // Within the tokens' int8 rounding of the fp32 product: |Σ w·(x̂ − x)| ≤ Σ_g d_g/2·Σ|w|,
        // plus fp32 rounding.
        const auto deq = qt::dequantize_weights(pt);
        for (int64_t t = 0; t < c.m; ++t)
          for (int64_t r = 0; r < c.n; ++r) {
            double exact = bp ? bp[r] : 0.0, bound = 1e-5;
            for (int64_t j = 0; j < c.k; ++j) {
              const double wj = deq[size_t(r * c.k + j)], xj = x[size_t(t * c.k + j)];
              exact += wj * xj;
              bound += std::abs(wj) * (0.5001 * d[size_t(t * ng + j / c.g)] + 1e-6 * std::abs(xj));
            }
            ASSERT_LE(std::abs(got[size_t(t * c.n + r)] - exact), bound) << "token " << t << " row " << r;
          }
      }
}

// The packed Linear: int8 tokens only when asked, for 4-bit affine weights of any scale dtype,
// at every batch size (the decode step's one token included); otherwise the path it had.
TEST_P(AffineI8Levels, LinearRunsItOnRequest) {
  const int64_t n = 45, k = 256;
  for (auto dt : {qt::DType::F32, qt::DType::BF16}) {
    PackedTensor pt =
        qt::quantize_weights(randn(size_t(n * k), 7, 0.05f).data(), n, k, scheme_params("affine", 4, 64, dt));
    const auto sc = qt::to_f32(pt.scales), bi = qt::to_f32(pt.biases);
    const auto w = qt::kernels::pack_affine_i8(pt.data.data, sc.data(), bi.data(), n, k, 64);
    for (auto act : {qt::WeightAct::Int8Group, qt::WeightAct::Int8Token}) {
      qt::PackedLinearOptions o;
      o.weight_act = act;
      auto lin = qt::make_packed_linear(pt, nullptr, o);
      EXPECT_EQ(lin->kind(), act == qt::WeightAct::Int8Group ? "affine4-g64-a8" : "affine4-g64-a8-token");
      for (int64_t m : {1, 3, 40}) {
        const auto x = tokens(m, k, uint32_t(m));
        std::vector<float> a(size_t(m * n)), b(size_t(m * n));
        lin->forward(x.data(), m, a.data());
        qt::kernels::affine_i8_gemm(w, x.data(), m, act == qt::WeightAct::Int8Token, nullptr, b.data());
        ASSERT_EQ(a, b) << "m " << m;
      }
    }
  }
  qt::PackedLinearOptions o;
  o.weight_act = qt::WeightAct::Int8Group;
  PackedTensor p8 = qt::quantize_weights(randn(size_t(n * k), 7, 0.05f).data(), n, k, scheme_params("affine", 8, 64));
  EXPECT_EQ(qt::make_packed_linear(p8, nullptr, o)->kind(), "affine8-g64");  // 8-bit: not this path
  PackedTensor nf = qt::quantize_weights(randn(size_t(n * k), 7, 0.05f).data(), n, k, scheme_params("nf4", 4, 64));
  EXPECT_EQ(qt::make_packed_linear(nf, nullptr, o)->kind(), "nf4-b64");
}

INSTANTIATE_TEST_SUITE_P(Levels, AffineI8Levels, ::testing::ValuesIn(qt::available_kernel_levels()),
                         [](const auto& info) { return std::string(qt::kernel_level_name(info.param)); });

// The AMX tiles themselves (i8::gemm_amx, called directly: the level's dispatch cannot hide a
// fallback) against the spec at their edges: one and two A tiles of a block partly filled (m 16, 17,
// 31, 32), a work item of one row (129), one panel and a partial one (n 5, 16), whole panel pairs
// (32, 48); one group of the whole k, 1 and 2 tile steps a group (MLX's 64 and 128); no write past
// y; calls below the threads' threshold and inside an outer parallel region.
TEST(AffineI8Amx, TilesAreTheSpecAtTheirEdges) {
  if (qt::max_kernel_level() < qt::KernelLevel::AMX) GTEST_SKIP() << "no AMX on this CPU";
  struct Kg {
    int64_t k, g;
  };
  auto check = [](int64_t n, Kg kg, int64_t m) {
    const int64_t k = kg.k, g = kg.g, ng = k / g;
    PackedTensor pt = qt::quantize_weights(randn(size_t(n * k), uint32_t(n + k), 0.05f).data(), n, k,
                                           scheme_params("affine", 4, int(g)));
    const auto sc = qt::to_f32(pt.scales), bi = qt::to_f32(pt.biases);
    const auto x = tokens(m, k, uint32_t(m + g));
    std::vector<int8_t> q(size_t(m * k));
    std::vector<float> d(size_t(m * ng)), bx(size_t(m * ng)), bias = randn(size_t(n), 5);
    for (int64_t t = 0; t < m; ++t)
      qt::kernels::quantize_token_i8_ref(x.data() + t * k, k, g, false, q.data() + t * k, d.data() + t * ng,
                                         bx.data() + t * ng);
    std::vector<float> want(size_t(m * n)), got(size_t(m * n) + 16, -7.0f);
    qt::kernels::affine_i8_gemm_ref(pt.data.data, sc.data(), bi.data(), n, k, g, q.data(), d.data(), bx.data(), m,
                                    bias.data(), want.data());
    const auto w = qt::kernels::pack_affine_i8(pt.data.data, sc.data(), bi.data(), n, k, g);
    EXPECT_TRUE(qt::kernels::i8::amx_supports(w));
    qt::kernels::i8::gemm_amx(w, q.data(), d.data(), bx.data(), m, bias.data(), got.data());
    for (size_t i = 0; i < want.size(); ++i)
      if (got[i] != want[i])
        return ::testing::AssertionFailure() << "n " << n << " k " << k << " g " << g << " m " << m << " at " << i;
    for (size_t i = want.size(); i < got.size(); ++i)
      if (got[i] != -7.0f) return ::testing::AssertionFailure() << "a write past y, n " << n << " m " << m;
    return ::testing::AssertionSuccess();
  };
  for (int64_t m : {16, 17, 31, 32, 129})
    for (int64_t n : {5, 16, 32, 48})
      for (Kg kg : {Kg{64, 64}, Kg{320, 64}, Kg{384, 128}, Kg{128, 128}}) ASSERT_TRUE(check(n, kg, m));
  bool ok = true;
#pragma omp parallel for num_threads(2) reduction(&& : ok)
  for (int i = 0; i < 4; ++i) ok = ok && bool(check(33 + i, Kg{128, 64}, 40 + i));
  EXPECT_TRUE(ok) << "inside an outer parallel region";
}

nlohmann::json read(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

// SmolLM2 at 4-bit affine, group 64, a few short chunks: eval-ppl's PPL through int8 tokens within
// 1% of the default path's, the KL divergence between them small, and the JSON naming the path.
TEST(AffineI8, SmallModelPplCloseToTheDefaultPath) {
  const std::string text = qt::test::data_file("wikitext-2/wiki.test.raw");
  QT_REQUIRE_FILE(text);
  QT_REQUIRE_FILE(qt::test::model_gguf());
  const std::string dir = qt::test::temp_dir("affine_i8"), q4 = dir + "/q4";
  const std::string bin = qt::test::quanttool_bin();
  std::string out;
  ASSERT_EQ(qt::test::run_cmd(bin + " convert --in " + qt::test::model_gguf() + " --out " + q4 +
                                  " --scheme affine --bits 4 --group-size 64",
                              &out),
            0)
      << out;
  const std::string args = " eval-ppl --model " + q4 + " --text " + text + " --ctx 128 --chunks 3 --threads 2";
  ASSERT_EQ(qt::test::run_cmd(bin + args + " --json " + dir + "/base.json", &out), 0) << out;
  ASSERT_EQ(
      qt::test::run_cmd(bin + args + " --weight-act int8 --kl-base-model " + q4 + " --json " + dir + "/a8.json", &out),
      0)
      << out;
  const auto base = read(dir + "/base.json"), a8 = read(dir + "/a8.json");
  EXPECT_EQ(a8["compute"], "affine4-g64-a8");
  const double p0 = base["ppl"].get<double>(), p1 = a8["ppl"].get<double>();
  EXPECT_NEAR(p1, p0, 0.01 * p0);
  EXPECT_LT(a8["kld"]["kld_mean"].get<double>(), 0.02) << a8["kld"].dump();
  std::printf("SmolLM2 affine4-g64: PPL %.4f default, %.4f int8 tokens; KLD %.2e\n", p0, p1,
              a8["kld"]["kld_mean"].get<double>());
  EXPECT_EQ(qt::test::run_cmd(bin + args + " --weight-act int4", &out), 2);
  EXPECT_NE(out.find("--weight-act"), std::string::npos) << out;
}

}  // namespace
