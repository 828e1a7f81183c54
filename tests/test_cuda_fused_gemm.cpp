// The W8A8 gate|up GEMM with SwiGLU fused (libquant/cuda/gemm_q8_fused.cu) against the path it
// replaces: cuBLASLt's GEMM into int32 sums, then swiglu_q8 (int8_ops.cu). The sums are exact, so
// the fused h must give those codes bit for bit. Then a whole W8A8 model both ways.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/cuda_support.h"

namespace qt {
namespace {

using namespace cudatest;

#define QT_REQUIRE_FUSED()                                                                           \
  do {                                                                                               \
    QT_REQUIRE_GPU();                                                                                \
    if (!cuda::testing::q8_fused_available()) GTEST_SKIP() << "built without CUTLASS, or not sm_90"; \
  } while (0)

std::vector<int8_t> random_i8(size_t n, uint32_t seed) {
  std::vector<int8_t> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& b : v) s = s * 1664525u + 1013904223u, b = int8_t(s >> 24);  // every code, −128 … 127
  return v;
}
std::vector<float> random_scales(size_t n, uint32_t seed, float base) {
  std::vector<float> v = randn(n, seed);
  for (float& x : v) x = base * (1.0f + 0.5f * std::abs(x));
  return v;
}

// Shapes off the 128-tile grid in every dimension (the kernel's edges), in a multiple of 16.
constexpr int kIn = 400, kN = 300, kF = 136;

// h's fp32 bits are what swiglu_q8 quantizes: quant_rows of h gives swiglu_q8's codes and scales.
TEST(CudaFusedGemm, Int8SwigluGivesSwigluQ8Codes) {
  QT_REQUIRE_FUSED();
  const auto w = random_i8(size_t(2 * kF) * kIn, 6), x = random_i8(size_t(kN) * kIn, 7);
  const auto sw = random_scales(2 * kF, 8, 2e-4f), sx = random_scales(kN, 9, 2e-2f);
  const auto acc = cuda::testing::gemm_i8(w, 2 * kF, kIn, x, kN);
  const cuda::testing::Q8 want = cuda::testing::swiglu_q8(acc, kN, kF, sx, sw);
  const auto h = cuda::testing::gemm_q8_swiglu(w, kF, kIn, sw, x, kN, sx);
  const cuda::testing::Q8 got = cuda::testing::quant_rows(h, kN, kF);
  ASSERT_EQ(got.q, want.q);
  for (int t = 0; t < kN; ++t) ASSERT_EQ(bits_of(got.s[t]), bits_of(want.s[t])) << t;
  // and h itself against the host's arithmetic on the exact sums (expf may differ by an ulp)
  double worst = 0;
  for (int t = 0; t < kN; ++t)
    for (int j = 0; j < kF; ++j) {
      const float g = sx[t] * (sw[j] * float(acc[size_t(t) * 2 * kF + j]));
      const float u = sx[t] * (sw[kF + j] * float(acc[size_t(t) * 2 * kF + kF + j]));
      const double r = double(g) / (1.0 + std::exp(-double(g))) * u, d = std::abs(h[size_t(t) * kF + j] - r);
      worst = std::max(worst, d / (std::abs(r) + 1e-30));
    }
  EXPECT_LT(worst, 1e-6);
}

// The tiny llama's W8A8 forward with the fused GEMM and without (force_unfused_gate_up):
// the same logits, bit for bit.
TEST(CudaFusedGemm, TinyLlamaW8A8SameLogitsBothWays) {
  QT_REQUIRE_FUSED();
  const std::string dir = convert_tiny("cuda-fused-w8a8", "--scheme int8 --group-size 0");
  ASSERT_FALSE(dir.empty());
  const auto ids = random_ids(40, 21);
  cuda::GpuModel lt(load_checkpoint(dir));
  cuda::testing::force_unfused_gate_up(lt);
  cuda::GpuModel fused(load_checkpoint(dir));
  const auto a = cuda::forward_logits(lt, ids), b = cuda::forward_logits(fused, ids);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(bits_of(a[i]), bits_of(b[i])) << i;
}

// Device time of each way at the 8B shape's FFN (n tokens, QT_FUSED_TIMING_N, default 32768: the
// default batch of eval-ppl at ctx 512), over the kernel shapes, tile orders and swizzles: printed,
// for the results page (results/cuda.md).
TEST(CudaFusedGemm, Timing) {
  QT_REQUIRE_FUSED();
  const char* e = std::getenv("QT_FUSED_TIMING_N");
  const int n = e ? std::atoi(e) : 32768, H = 4096, F = 14336, reps = 5;
  const double gflop = 2.0 * n * H * 2 * F / 1e9;
  for (int round = 0; round < 2; ++round) {
    const float lt = cuda::testing::q8_swiglu_ms(false, F, H, n, reps),
                fu = cuda::testing::q8_swiglu_ms(true, F, H, n, reps);
    std::printf("int8 gate|up n=%d: cuBLASLt + swiglu_q8 %.3f ms, fused + quant_rows %.3f ms (%.0f T/s): %.3fx\n", n,
                lt, fu, gflop / fu, lt / fu);
    EXPECT_GT(fu, 0.0f);
  }
}

}  // namespace
}  // namespace qt
