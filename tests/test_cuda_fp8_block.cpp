// FP8_BLOCK on Hopper's FP8 tensor cores (libquant/cuda/model_blockfp.cpp): the activation codes
// and group scales equal the CPU's quantize_token_fp8 per group of 128 bit for bit; the
// block-scaled cuBLASLt GEMM (GemmLt::run_block_f8) equals a double-precision sum of the same codes
// and scales within its accumulation error; the 128-wide llama converted to fp8_block runs on the
// GPU near the CPU's forward of the folder, on the tensor cores and through the bf16 decode.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "libquant/schemes/e4m3.h"
#include "tests/cuda_support.h"

namespace qt {
namespace {

using namespace cudatest;

// The activation test's rows: an outlier, a zero token, a zero group, tiny and huge values.
std::vector<float> test_rows(int rows, int k, uint32_t seed) {
  std::vector<float> x = randn(size_t(rows) * k, seed, 2.0f);
  x[5] = 300.0f;
  std::fill(x.begin() + 2 * k, x.begin() + 3 * k, 0.0f);
  std::fill(x.begin() + 4 * k, x.begin() + 4 * k + 128, 0.0f);
  for (int j = 0; j < k; ++j) x[size_t(6 * k + j)] *= 1e-30f;
  for (int j = 0; j < k; j += 7) x[size_t(7 * k + j)] *= 1e30f;
  for (int j = 0; j < 128; ++j) x[size_t(8 * k + j)] = j % 2 ? 1e-20f : 5.0f;
  return x;
}

TEST(CudaFp8Block, GroupCodesEqualTheCpu) {
  QT_REQUIRE_GPU();
  for (int k : {128, 384, 1152}) {
    const int rows = 37, G = k / 128;
    const std::vector<float> x = test_rows(rows, k, uint32_t(k));
    const cuda::testing::F8 got = cuda::testing::quantize_fp8_groups(x, rows, k);
    ASSERT_EQ(got.q.size(), size_t(rows) * k);
    ASSERT_EQ(got.s.size(), size_t(rows) * G);
    std::vector<float> rounded = x;
    round_activations_fp8_groups(rounded.data(), rows, k);
    size_t bad = 0;
    for (int t = 0; t < rows; ++t)
      for (int g = 0; g < G; ++g) {
        float q[128];
        const float s = quantize_token_fp8(x.data() + size_t(t) * k + g * 128, 128, q);
        bad += bits_of(got.s[size_t(g) * rows + t]) != bits_of(s);
        for (int j = 0; j < 128; ++j) {
          const size_t i = size_t(t) * k + g * 128 + j;
          const float v = e4m3_to_f32(got.q[i]);
          bad += bits_of(v) != bits_of(q[j]) && !(v == 0.0f && q[j] == 0.0f);
          bad += bits_of(v * s) != bits_of(rounded[i]) && !(v * s == 0.0f && rounded[i] == 0.0f);  // the CPU's rounding
        }
      }
    EXPECT_EQ(bad, 0u) << "k " << k;
  }
}

// Parts stacked as q|k|v: 256 + 160 rows share a segment (the 160's last block partial), then 64
// and 48 rows each their own; 384 columns (3 scales a block row, padded to 4). Reference: per output
// Σ_b s_w · s_x · Σ_j e4m3(w_j) · e4m3(x_j) in double, from the CPU's codes and scales. Bar:
// 2^-10 of Σ |terms| — Hopper's FP8 MMA adds a block's products with fewer bits than fp32 (about
// 14 significant; DeepSeek-V3 report, section 3.3.2) before cuBLASLt promotes each block's sum
// into fp32 (about 2^-13 per MMA of 32 products, four of them a block), so the error is well
// above fp32 rounding but far below an E4M3 step (2^-4 relative):
// a scale from the wrong block or token moves an output by about its own size.
TEST(CudaFp8Block, GemmEqualsTheCodesSums) {
  QT_REQUIRE_GPU();
  const int in = 384, n = 36, G = in / 128;
  std::vector<PackedTensor> parts;
  for (int rows : {256, 160, 64, 48}) {
    std::vector<float> w = randn(size_t(rows) * in, uint32_t(rows), 0.05f);
    for (int j = 0; j < in; j += 37) w[size_t(j)] *= 50.0f;
    for (int r = 130; r < rows; ++r) w[size_t(r) * in + 200] *= 30.0f;  // another block scale per block row
    parts.push_back(quantize_weights(w.data(), rows, in, test::scheme_params("fp8_block", 8, 128, DType::BF16)));
  }
  std::vector<const PackedTensor*> pp;
  for (const PackedTensor& p : parts) pp.push_back(&p);
  std::vector<float> x = randn(size_t(n) * in, 99, 1.0f);
  for (int t = 0; t < n; t += 5) x[size_t(t) * in + 140] = 80.0f;  // group scales that differ by token and group
  for (int pass = 0; pass < 2; ++pass) {
    const bool acc = pass == 1;
    int total = 0;
    for (const PackedTensor& p : parts) total += int(p.rows);
    const std::vector<float> y0 = acc ? randn(size_t(n) * total, 7, 10.0f) : std::vector<float>{};
    const std::vector<float> got = cuda::testing::gemm_fp8_block(pp, x, n, y0);
    ASSERT_EQ(got.size(), size_t(n) * total) << "cuBLASLt refused the block-scaled GEMM" << (acc ? " (beta 1)" : "");
    double worst = 0;
    int row0 = 0;
    for (const PackedTensor& p : parts) {
      const std::vector<float> sw = to_f32(p.scales);
      for (int t = 0; t < n; ++t) {
        float sx[8];
        std::vector<float> xq(static_cast<size_t>(in));
        for (int g = 0; g < G; ++g)
          sx[g] = quantize_token_fp8(x.data() + size_t(t) * in + g * 128, 128, xq.data() + g * 128);
        for (int r = 0; r < int(p.rows); ++r) {
          double ref = 0, mag = 0;
          for (int g = 0; g < G; ++g) {
            double dot = 0, dmag = 0;
            for (int j = g * 128; j < g * 128 + 128; ++j) {
              const double w = e4m3_to_f32(p.data.data[size_t(r) * in + j]);
              dot += w * xq[size_t(j)], dmag += std::abs(w * xq[size_t(j)]);
            }
            const double s = double(sw[size_t(r / 128) * G + g]) * sx[g];
            ref += s * dot, mag += std::abs(s) * dmag;
          }
          const size_t i = size_t(t) * total + row0 + r;
          const double base = acc ? double(y0[i]) : 0.0;
          const double err = std::abs(double(got[i]) - base - ref);
          ASSERT_LE(err, std::ldexp(mag, -10) + 1e-6 * std::abs(base))
              << (acc ? "beta 1: " : "") << "token " << t << " row " << row0 + r << ": gpu " << got[i] - base << " ref "
              << ref;
          if (mag > 0) worst = std::max(worst, err / mag);
        }
      }
      row0 += int(p.rows);
    }
    std::printf("fp8 block gemm%s: max |gpu - ref| / sum|terms| = %.3g (2^%.1f)\n", acc ? " (beta 1)" : "", worst,
                worst > 0 ? std::log2(worst) : -999.0);
  }
}

std::vector<float> gpu_logits(const std::string& dir, const std::vector<int32_t>& ids, bool decode) {
  cuda::GpuModel gpu(load_checkpoint(dir));
  if (decode) cuda::testing::force_fp8_block_decode(gpu);
  EXPECT_EQ(gpu.kind(), "fp8_block");
  return cuda::forward_logits(gpu, ids);
}

double ppl_of(const std::vector<float>& logits, const std::vector<int32_t>& ids) {
  const size_t V = logits.size() / ids.size();
  double nll = 0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const float* row = logits.data() + t * V;
    double m = row[0], s = 0;
    for (size_t v = 1; v < V; ++v) m = std::max(m, double(row[v]));
    for (size_t v = 0; v < V; ++v) s += std::exp(double(row[v]) - m);
    nll += m + std::log(s) - row[ids[t + 1]];
  }
  return std::exp(nll / double(ids.size() - 1));
}

// The 128-wide llama (q 128, k and v 64 rows: segments of 192 and 64) as fp8_block: the GPU's
// logits on the tensor cores and through the decode against the CPU's forward of the folder, with
// the bar of CudaFp4.ModelsMatchTheCpu's activation-rounding rows (0.1 of the logits' magnitude or
// 1.5x the CPU's bf16-against-fp32 GEMM spread); the PPL of the ids printed beside. Both paths must
// give different logits (the tensor-core path ran, not the fallback).
TEST(CudaFp8Block, ModelMatchesTheCpu) {
  QT_REQUIRE_GPU();
  const std::string src = test::temp_dir("cuda-fp8-block-wide") + "/src";
  write_wide_llama(src);
  const std::string dir = test::temp_dir("cuda-fp8-block") + "/m";
  std::string log;
  ASSERT_EQ(
      test::run_cmd(
          test::quanttool_bin() + " convert --in " + src + " --out " + dir + " --scheme fp8_block --dtype bf16", &log),
      0)
      << log;
  const auto ids = random_ids(40, 17);
  Checkpoint a = load_checkpoint(dir);
  LlamaModel cpu(a, checkpoint_linear_factory(a, {}));
  const auto want = model_logits(cpu, ids, "f16");
  PackedLinearOptions bf16_gemms;
  bf16_gemms.compute = Compute::BF16;
  LlamaModel cpu_b(a, checkpoint_linear_factory(a, bf16_gemms));
  const auto cpu_bf16 = model_logits(cpu_b, ids, "f16");
  const double spread = rms_diff(cpu_bf16, want), mag = rms_diff(want, std::vector<float>(want.size(), 0.0f));
  const auto lt = gpu_logits(dir, ids, false), dec = gpu_logits(dir, ids, true);
  ASSERT_EQ(lt.size(), want.size());
  ASSERT_EQ(dec.size(), want.size());
  const double e_lt = rms_diff(lt, want), e_dec = rms_diff(dec, want);
  std::printf(
      "fp8_block gpu-cpu rms: tensor cores %.5f, bf16 decode %.5f (cpu logits rms %.5f, cpu bf16 gemms %.5f away); "
      "PPL cpu %.4f, cpu bf16 gemms %.4f, gpu tensor cores %.4f, gpu decode %.4f\n",
      e_lt, e_dec, mag, spread, ppl_of(want, ids), ppl_of(cpu_bf16, ids), ppl_of(lt, ids), ppl_of(dec, ids));
  EXPECT_LT(e_lt, std::max(0.1 * mag, 1.5 * spread));
  EXPECT_LT(e_dec, std::max(0.1 * mag, 1.5 * spread));
  EXPECT_GT(rms_diff(lt, dec), 0.0) << "the tensor-core path gave the decode's logits bit for bit";
}

}  // namespace
}  // namespace qt
