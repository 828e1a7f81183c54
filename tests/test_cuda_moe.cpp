// Mixture-of-experts on the GPU (libquant/cuda/moe_ffn.cpp): the tiny qwen3_moe (a dense middle
// layer, top-2 weights not renormalised) and mixtral (renormalised) goldens of test_moe.cpp, and
// gpt_oss's of test_gpt_oss.cpp (biased router and experts, clamped SwiGLU, attention sinks and
// biases, sliding layers, YaRN; bf16 and MXFP4 experts), transformers' fp32 logits. The bar is the
// dense rows' (test_cuda_arch.cpp): the GPU's bf16 forward is no further from the golden than 1.5x
// the CPU's bf16 forward (f16 cache), and its eval-ppl mean NLL no further from transformers' than
// 1.5x the CPU bf16 one. Also: the same logits every run (the experts' sums in a fixed order), and
// quantized experts (W8A8, FP8, MLX affine) against the CPU's forward of the same folder.
#include <cctype>
#include <fstream>
#include <tuple>

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

INSTANTIATE_TEST_SUITE_P(Archs, CudaMoe, ::testing::Values("qwen3-moe", "mixtral", "gpt-oss", "gpt-oss-mxfp4"));

// A tiny MoE converted with quantized experts, on the GPU against the CPU's forward of the same
// folder. Per-token 8-bit activations turn last-bit differences upstream (the f16 attention's sums,
// the bf16 router) into whole quantization steps, as for the dense W8A8 model (test_cuda_model.cpp):
// the bar is the PPL, held to twice the CPU's own move between an f16 and an f32 cache.
class CudaMoeQuant : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {};

TEST_P(CudaMoeQuant, PerplexityMatchesCpu) {
  QT_REQUIRE_GPU();
  const auto& [model, flags, kind] = GetParam();
  const std::string dir = test::temp_dir("cuda-moe-q-" + model + "-" + kind) + "/m";
  std::string out;
  ASSERT_EQ(test::run_cmd(
                test::quanttool_bin() + " convert --in " + test::tiny_dir(model) + " --out " + dir + " " + flags, &out),
            0)
      << out;
  Checkpoint a = load_checkpoint(dir);
  PackedLinearOptions lo;
  lo.compute = Compute::BF16;
  LlamaModel cpu(a, checkpoint_linear_factory(a, lo));
  cuda::GpuModel gpu(load_checkpoint(dir));
  EXPECT_EQ(gpu.kind(), kind);
  const auto ids = random_ids(40, 21);
  const auto want = model_logits(cpu, ids, "f16"), got = cuda::forward_logits(gpu, ids);
  ASSERT_EQ(got.size(), want.size());
  // Logits of the same order as the CPU's: 0.013-0.093 on an H100, 0.131 for gpt_oss W8A8, whose own
  // PPL moves by 1.9% between an f16 and an f32 cache on the CPU (results/moe.md).
  EXPECT_LT(rms_diff(got, want), 0.25);
  EXPECT_EQ(cuda::forward_logits(gpu, ids), got);
  PplOptions po;
  po.ctx = 32;
  po.bos_id = 1;
  const auto text = random_ids(6 * 32, 22);
  PplOptions pc = po;
  pc.kv = kv::uniform_kv_config(a.config.n_layers, kv::parse_kv_spec("f16", "kv"), kv::parse_kv_spec("f16", "kv"));
  const PplResult pw = evaluate_perplexity(cpu, text, pc), pg = cuda::evaluate_perplexity(gpu, text, po, 2);
  const PplResult p32 = evaluate_perplexity(cpu, text, po);
  const double own = std::abs(pw.ppl / p32.ppl - 1.0);
  std::printf("tiny-%-10s %-6s ppl: gpu %.5f cpu f16 cache %.5f cpu f32 cache %.5f | logits gpu-cpu rms %.4f\n",
              model.c_str(), kind.c_str(), pg.ppl, pw.ppl, p32.ppl, rms_diff(got, want));
  EXPECT_LT(std::abs(pg.ppl / pw.ppl - 1.0), 2 * own + 2e-3)
      << "gpu " << pg.ppl << " cpu " << pw.ppl << " cpu f32 cache " << p32.ppl;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CudaMoeQuant,
    ::testing::Values(std::make_tuple("qwen3-moe", "--scheme int8 --group-size 0", "w8a8"),
                      std::make_tuple("qwen3-moe", "--scheme fp8", "fp8"),
                      std::make_tuple("mixtral", "--scheme int8 --group-size 0", "w8a8"),
                      std::make_tuple("gpt-oss", "--scheme int8 --group-size 0", "w8a8"),
                      std::make_tuple("gpt-oss", "--scheme affine --bits 4 --group-size 32", "affine4-g32"),
                      std::make_tuple("gpt-oss", "--scheme affine --bits 8 --group-size 32", "affine8-g32")),
    [](const auto& info) {
      std::string n = std::get<0>(info.param) + "_" + std::get<2>(info.param);
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

}  // namespace
}  // namespace qt
