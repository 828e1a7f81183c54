// Mixture-of-experts on the GPU (libquant/cuda/moe_ffn.cpp): the tiny qwen3_moe (a dense middle
// layer, top-2 weights not renormalised) and mixtral (renormalised) goldens of test_moe.cpp,
// transformers' fp32 logits. The bar is the dense rows' (test_cuda_arch.cpp): the GPU's bf16
// forward is no further from the golden than 1.5x the CPU's bf16 forward (f16 cache), and its
// eval-ppl mean NLL no further from transformers' than 1.5x the CPU bf16 one. Also: the same
// logits every run (the experts' sums in a fixed order), and the refusals (quantized MoE, gpt_oss).
#include <fstream>

#include "formats/error.h"
#include "tests/cuda_support.h"

namespace qt {
namespace {

using namespace cudatest;

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

class CudaMoe : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaMoe, Bf16MatchesGoldenAndRepeats) {
  QT_REQUIRE_GPU();
  const test::TinyGolden g = test::tiny_golden(GetParam());
  const auto cpu = cpu_logits(g.ck, Compute::BF16, "f16", g.ids);
  cuda::GpuModel gpu(load_checkpoint(test::tiny_dir(GetParam())));
  EXPECT_EQ(gpu.kind(), "bf16");
  const auto got = cuda::forward_logits(gpu, g.ids);
  ASSERT_EQ(got.size(), g.logits.size());
  ASSERT_EQ(cpu.size(), g.logits.size());
  const double e_gpu = rms_diff(got, g.logits), e_cpu = rms_diff(cpu, g.logits);
  std::printf("tiny-%-10s bf16: gpu-golden rms %.4f max %.4f | cpu bf16-golden rms %.4f max %.4f | gpu-cpu max %.4f\n",
              GetParam().c_str(), e_gpu, max_diff(got, g.logits), e_cpu, max_diff(cpu, g.logits), max_diff(got, cpu));
  EXPECT_GT(e_cpu, 0.0);
  EXPECT_LT(e_gpu, 1.5 * e_cpu + 1e-4) << "gpu " << e_gpu << " cpu bf16 " << e_cpu;
  // Deterministic: the pairs sorted stably, each token's experts summed in ascending order.
  EXPECT_EQ(cuda::forward_logits(gpu, g.ids), got);
  // A longer batch (the golden's ids repeated): many tokens per expert, several fill steps.
  std::vector<int32_t> many;
  for (int r = 0; r < 30; ++r) many.insert(many.end(), g.ids.begin(), g.ids.end());
  const auto a = cuda::forward_logits(gpu, many), b = cuda::forward_logits(gpu, many);
  EXPECT_EQ(a, b);
  const auto cpu_many = cpu_logits(g.ck, Compute::BF16, "f16", many);
  std::printf("tiny-%-10s bf16, %zu tokens: gpu-cpu rms %.4f\n", GetParam().c_str(), many.size(),
              rms_diff(a, cpu_many));
  EXPECT_LT(rms_diff(a, cpu_many), 0.1);
}

// eval-ppl's chunks at ctx 8 on the GPU (two chunks in one forward) against transformers' mean
// NLL (ppl_chunks_ctx8), held to the CPU bf16 path's distance from it.
TEST_P(CudaMoe, PerplexityMatchesCpu) {
  QT_REQUIRE_GPU();
  const test::TinyGolden g = test::tiny_golden(GetParam());
  PplOptions o;
  o.method = PplMethod::Chunks;
  o.ctx = 8;
  LlamaModel cbf(g.ck, Compute::BF16);
  PplOptions oc = o;
  oc.kv = kv::uniform_kv_config(g.ck.config.n_layers, kv::parse_kv_spec("f16", "kv"), kv::parse_kv_spec("f16", "kv"));
  const PplResult cpu = evaluate_perplexity(cbf, g.ids, oc);
  cuda::GpuModel gpu(load_checkpoint(test::tiny_dir(GetParam())));
  const PplResult got = cuda::evaluate_perplexity(gpu, g.ids, o, 2);
  EXPECT_EQ(got.tokens_scored, cpu.tokens_scored);
  std::printf("tiny-%-10s ppl ctx8: mean nll gpu %.5f cpu bf16 %.5f transformers %.5f\n", GetParam().c_str(),
              got.mean_nll, cpu.mean_nll, g.ppl_chunks_ctx8);
  EXPECT_LT(std::abs(got.mean_nll - g.ppl_chunks_ctx8), 1.5 * std::abs(cpu.mean_nll - g.ppl_chunks_ctx8) + 2e-3);
}

// Quantized mixture-of-experts folders run on the CPU only: one "not on cuda yet" line.
TEST_P(CudaMoe, QuantizedRefused) {
  QT_REQUIRE_GPU();
  const std::string dir = test::temp_dir("cuda-moe-w8-" + GetParam()) + "/m";
  std::string out;
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + test::tiny_dir(GetParam()) + " --out " + dir +
                              " --scheme int8 --group-size 0",
                          &out),
            0)
      << out;
  try {
    cuda::GpuModel gpu(load_checkpoint(dir));
    ADD_FAILURE() << "a quantized MoE folder loaded on the GPU";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("not on cuda yet"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaMoe, ::testing::Values("qwen3-moe", "mixtral"));

TEST(CudaMoeGptOss, Refused) {
  QT_REQUIRE_GPU();
  try {
    cuda::GpuModel gpu(load_checkpoint(test::tiny_dir("gpt-oss")));
    ADD_FAILURE() << "gpt_oss loaded on the GPU";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("gpt_oss"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not on cuda yet"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qt
