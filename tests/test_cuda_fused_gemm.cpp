// The W8A8 GEMMs with fused epilogues (libquant/cuda/gemm_q8_*.cu) against the paths they replace:
// cuBLASLt's GEMM into int32 sums, then swiglu_q8 or rope_split_q8 (int8_ops.cu). The sums are
// exact, so the fused outputs must give those bits. Then whole W8A8 models both ways. FP8's (E4M3
// codes, the tensor cores' own accumulation) against exact sums within that accumulation's error,
// and a whole FP8 model both ways within a fraction of FP8's own error.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "libquant/schemes/e4m3.h"
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

// Random E4M3 codes: the bytes masked with 0x77 (every mantissa; sign and the exponent's low bit
// cleared: non-negative values, even exponents up to 14, no NaN, at most 240) or, signed, with 0xf7
// (the same magnitudes, either sign).
constexpr uint8_t kNonNegative = 0x77, kSigned = 0xf7;
std::vector<uint8_t> random_e4m3(size_t n, uint32_t seed, uint8_t mask = kNonNegative) {
  std::vector<uint8_t> v(n);
  const auto b = random_i8(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(b[i]) & mask;
  return v;
}

// Exact sums of X [n, in] · W [out, in]ᵀ of E4M3 codes (sum[t, j]) and Σ|a·w| (mag[t, j]), in double.
struct ExactSums {
  std::vector<double> sum, mag;
};
ExactSums exact_f8_sums(const std::vector<uint8_t>& w, int out, int in, const std::vector<uint8_t>& x, int n) {
  ExactSums r{std::vector<double>(size_t(n) * out), std::vector<double>(size_t(n) * out)};
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < out; ++j) {
      double s = 0, m = 0;
      for (int i = 0; i < in; ++i) {
        const double p = double(e4m3_to_f32(x[size_t(t) * in + i])) * e4m3_to_f32(w[size_t(j) * in + i]);
        s += p, m += std::abs(p);
      }
      r.sum[size_t(t) * out + j] = s, r.mag[size_t(t) * out + j] = m;
    }
  return r;
}
// The bound on FP8 sums without promotion, as a fraction of Σ|a·w|: Hopper's FP8 tensor cores add
// each MMA step's 32 products into the running sum with about 14 bits kept (DeepSeek-V3 technical
// report, arXiv:2412.19437 §3.3.2), a loss that grows with in / 32 and with the products' spread;
// on these codes (in 400, magnitudes 2^-9 … 240) the H100 measured 2^-7.9. 2^-6 holds that with
// margin; a wrong scale, column or rotation partner errs by the order of the values themselves
// (these codes are non-negative, so |Σ a·w| is Σ|a·w|, 2^6 over the bound).
constexpr double kF8SumError = 1.0 / 64;

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

// FP8's gate|up GEMM with SwiGLU: h against silu(g)·u of the exact sums, within what the sums'
// accumulation error (kF8SumError of Σ|a·w| on g and u) moves it (silu' ≤ 1.1). Non-negative codes
// (where a wrong scale or column errs by the values themselves) and signed ones (g < 0: silu's
// other branch; sums that cancel).
TEST(CudaFusedGemm, Fp8SwigluWithinTheSumsError) {
  QT_REQUIRE_FUSED();
  for (const uint8_t mask : {kNonNegative, kSigned}) {
    SCOPED_TRACE(mask == kSigned ? "signed codes" : "non-negative codes");
    const auto w = random_e4m3(size_t(2 * kF) * kIn, 16, mask), x = random_e4m3(size_t(kN) * kIn, 17, mask);
    const auto sw = random_scales(2 * kF, 18, 2e-4f), sx = random_scales(kN, 19, 2e-2f);
    const ExactSums e = exact_f8_sums(w, 2 * kF, kIn, x, kN);
    const auto h = cuda::testing::gemm_f8_swiglu(w, kF, kIn, sw, x, kN, sx);
    double worst = 0, mag = 0;
    int negative_g = 0;
    for (int t = 0; t < kN; ++t)
      for (int j = 0; j < kF; ++j) {
        const size_t gi = size_t(t) * 2 * kF + j, ui = gi + kF;
        const double g = double(sx[t]) * sw[j] * e.sum[gi], u = double(sx[t]) * sw[kF + j] * e.sum[ui];
        const double eg = double(sx[t]) * sw[j] * e.mag[gi] * kF8SumError,
                     eu = double(sx[t]) * sw[kF + j] * e.mag[ui] * kF8SumError;
        const double silu = g / (1.0 + std::exp(-g)), r = silu * u;
        const double bound = 1.1 * eg * (std::abs(u) + eu) + std::abs(silu) * eu + 1e-6 * std::abs(r) + 1e-30;
        worst = std::max(worst, std::abs(h[size_t(t) * kF + j] - r) / bound);
        mag = std::max(mag, std::abs(r));
        negative_g += g < -eg;
      }
    std::printf("fp8 gate|up + SwiGLU, %s: worst |h - exact| = %.3g of the bound\n",
                mask == kSigned ? "signed" : "non-negative", worst);
    EXPECT_LE(worst, 1.0);
    EXPECT_GT(mag, 1e-3);  // not a comparison of zeros
    if (mask == kSigned) {
      EXPECT_GT(negative_g, kN * kF / 4);  // silu's negative branch is exercised
    }
  }
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
  ASSERT_TRUE(cuda::testing::runs_q8_swiglu(fused));  // the comparison is not of one path with itself
  ASSERT_FALSE(cuda::testing::runs_q8_swiglu(lt));
  const auto a = cuda::forward_logits(lt, ids), b = cuda::forward_logits(fused, ids);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(bits_of(a[i]), bits_of(b[i])) << i;
}

// The q|k|v GEMM with RoPE in its epilogue against cuBLASLt's int32 sums and rope_split_q8: the same
// f16 bits, q, k and v side by side in each row. Head dims 64 and 128 with widths off the 128-wide
// tiles (a tile holding k and v heads, a partial last tile), tokens off the 128-row tiles, positions
// wrapping at T.
TEST(CudaFusedGemm, Int8RopeGivesRopeSplitQ8Bits) {
  QT_REQUIRE_FUSED();
  struct Case {
    int hd, nh, nkv, n, T;
  };
  for (const Case c : {Case{64, 5, 1, 300, 100}, Case{128, 3, 1, 300, 77}, Case{128, 4, 2, 200, 200}}) {
    const int Q = c.nh * c.hd, KV = c.nkv * c.hd, out = Q + 2 * KV;
    const auto w = random_i8(size_t(out) * kIn, 10 + c.hd), x = random_i8(size_t(c.n) * kIn, 11);
    const auto sw = random_scales(out, 12, 2e-4f), sx = random_scales(c.n, 13, 2e-2f);
    std::vector<float> cs(size_t(c.T) * c.hd / 2), sn(cs.size());
    for (int p = 0; p < c.T; ++p)
      for (int i = 0; i < c.hd / 2; ++i) {
        const double a = p * std::pow(10000.0, -2.0 * i / c.hd);
        cs[size_t(p) * c.hd / 2 + i] = float(std::cos(a)), sn[size_t(p) * c.hd / 2 + i] = float(std::sin(a));
      }
    const auto acc = cuda::testing::gemm_i8(w, out, kIn, x, c.n);
    const auto want = cuda::testing::rope_split_q8(acc, sx, sw, c.n, c.T, c.nh, c.nkv, c.hd, cs, sn);  // q, k, v
    const auto got = cuda::testing::gemm_q8_rope(w, out, kIn, sw, x, c.n, sx, c.T, c.hd, Q + KV, cs, sn);
    ASSERT_EQ(got.size(), want.size());
    double mag = 0;
    for (int t = 0; t < c.n; ++t)
      for (int j = 0; j < out; ++j) {
        const size_t from = j < Q        ? size_t(t) * Q + j
                            : j < Q + KV ? size_t(c.n) * Q + size_t(t) * KV + (j - Q)
                                         : size_t(c.n) * (Q + KV) + size_t(t) * KV + (j - Q - KV);
        const float g = got[size_t(t) * out + j];
        mag = std::max(mag, double(std::abs(g)));
        ASSERT_EQ(bits_of(g), bits_of(want[from])) << "hd " << c.hd << " token " << t << " column " << j;
      }
    EXPECT_GT(mag, 1e-3);  // not a comparison of zeros
  }
}

// FP8's q|k|v GEMM with RoPE: each value against RoPE of the exact sums' values, within the sums'
// accumulation error (of the pair's two sums: |cos|, |sin| ≤ 1) and the f16 rounding.
TEST(CudaFusedGemm, Fp8RopeWithinTheSumsError) {
  QT_REQUIRE_FUSED();
  const int hd = 128, nh = 3, nkv = 1, n = 300, T = 77, Q = nh * hd, KV = nkv * hd, out = Q + 2 * KV;
  const auto w = random_e4m3(size_t(out) * kIn, 20), x = random_e4m3(size_t(n) * kIn, 21);
  const auto sw = random_scales(out, 22, 2e-4f), sx = random_scales(n, 23, 2e-2f);
  std::vector<float> cs(size_t(T) * hd / 2), sn(cs.size());
  for (int p = 0; p < T; ++p)
    for (int i = 0; i < hd / 2; ++i) {
      const double a = p * std::pow(10000.0, -2.0 * i / hd);
      cs[size_t(p) * hd / 2 + i] = float(std::cos(a)), sn[size_t(p) * hd / 2 + i] = float(std::sin(a));
    }
  const ExactSums e = exact_f8_sums(w, out, kIn, x, n);
  const auto got = cuda::testing::gemm_f8_rope(w, out, kIn, sw, x, n, sx, T, hd, Q + KV, cs, sn);
  ASSERT_EQ(got.size(), size_t(n) * out);
  double worst = 0, mag = 0;
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < out; ++j) {
      const size_t at = size_t(t) * out + j;
      auto y = [&](int c) { return double(sx[t]) * sw[c] * e.sum[size_t(t) * out + c]; };
      auto err = [&](int c) { return double(sx[t]) * sw[c] * e.mag[size_t(t) * out + c] * kF8SumError; };
      double r = y(j), bound = err(j);
      if (j < Q + KV) {  // a q or k head: rotate-half with its partner
        const int i = j % hd, half = hd / 2, lo = i < half ? i : i - half, partner = i < half ? j + half : j - half;
        const double c = cs[size_t(t % T) * half + lo], s = sn[size_t(t % T) * half + lo];
        r = i < half ? y(j) * c - y(partner) * s : y(j) * c + y(partner) * s;
        bound = err(j) + err(partner);
      }
      bound += std::abs(r) * std::ldexp(1.0, -10) + 1e-7;  // f16's rounding (and its subnormals)
      worst = std::max(worst, std::abs(got[at] - r) / bound);
      mag = std::max(mag, std::abs(r));
    }
  std::printf("fp8 q|k|v + RoPE: worst |y - exact| = %.3g of the bound\n", worst);
  EXPECT_LE(worst, 1.0);
  EXPECT_GT(mag, 1e-3);
}

// A W8A8 llama with head dim 64 (the fused attention's; the tiny llama's 8 keeps it off) with the
// q|k|v GEMM fused and without (force_unfused_qkv): the same logits, bit for bit — q, k, v read in
// place from the GEMM's rows give the attention the same values in the same order.
TEST(CudaFusedGemm, WideLlamaW8A8SameLogitsWithRopeFused) {
  QT_REQUIRE_FUSED();
  const std::string base = test::temp_dir("cuda-fused-rope"), src = base + "/src", dir = base + "/w8";
  test::write_wide_llama(src, 2, 0.1f, 64);
  std::string log;
  ASSERT_EQ(
      test::run_cmd(test::quanttool_bin() + " convert --in " + src + " --out " + dir + " --scheme int8 --group-size 0",
                    &log),
      0)
      << log;
  const auto ids = random_ids(100, 22);
  cuda::GpuModel lt(load_checkpoint(dir));
  cuda::testing::force_unfused_qkv(lt);
  cuda::GpuModel fused(load_checkpoint(dir));
  ASSERT_TRUE(cuda::testing::runs_q8_rope(fused));
  ASSERT_FALSE(cuda::testing::runs_q8_rope(lt));
  const auto a = cuda::forward_logits(lt, ids), b = cuda::forward_logits(fused, ids);
  ASSERT_EQ(a.size(), b.size());
  double mag = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(bits_of(a[i]), bits_of(b[i])) << i;
    mag = std::max(mag, double(std::abs(a[i])));
  }
  EXPECT_GT(mag, 0.1);
}

// An FP8 llama (head dim 64) with both fused GEMMs and without (force_unfused_qkv and
// force_unfused_gate_up: cuBLASLt's FP8 GEMMs and the passes): the sums differ in their
// accumulation order, so the logits within a small fraction of FP8's own error (against the bf16
// checkpoint on the GPU).
TEST(CudaFusedGemm, WideLlamaFp8NearTheUnfusedPath) {
  QT_REQUIRE_FUSED();
  const std::string base = test::temp_dir("cuda-fused-fp8"), src = base + "/src", dir = base + "/fp8";
  test::write_wide_llama(src, 2, 0.1f, 64);
  std::string log;
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + src + " --out " + dir + " --scheme fp8", &log), 0)
      << log;
  const auto ids = random_ids(100, 23);
  cuda::GpuModel lt(load_checkpoint(dir));
  cuda::testing::force_unfused_qkv(lt);
  cuda::testing::force_unfused_gate_up(lt);
  cuda::GpuModel fused(load_checkpoint(dir));
  ASSERT_EQ(fused.kind(), "fp8");
  ASSERT_TRUE(cuda::testing::runs_q8_rope(fused));
  ASSERT_TRUE(cuda::testing::runs_q8_swiglu(fused));
  ASSERT_FALSE(cuda::testing::runs_q8_swiglu(lt));
  cuda::GpuModel dense(load_checkpoint(src));
  const auto a = cuda::forward_logits(lt, ids), b = cuda::forward_logits(fused, ids),
             ref = cuda::forward_logits(dense, ids);
  ASSERT_EQ(a.size(), b.size());
  const double d = rms_diff(a, b), own = rms_diff(a, ref);
  std::printf("wide fp8: logits rms fused - unfused %.4g, unfused - bf16 %.4g\n", d, own);
  EXPECT_GT(own, 1e-3);
  EXPECT_LT(d, 0.25 * own);
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
    for (const bool f8 : {false, true}) {
      const char* what = f8 ? "fp8" : "int8";
      const float lt = cuda::testing::q8_swiglu_ms(false, f8, F, H, n, reps),
                  fu = cuda::testing::q8_swiglu_ms(true, f8, F, H, n, reps);
      std::printf("%s gate|up n=%d: cuBLASLt + swiglu_q8 %.3f ms, fused + quant_rows %.3f ms (%.0f T/s): %.3fx\n", what,
                  n, lt, fu, gflop / fu, lt / fu);
      EXPECT_GT(fu, 0.0f);
      const float rl = cuda::testing::q8_rope_ms(false, f8, H, 32, 8, 128, n, reps),
                  rf = cuda::testing::q8_rope_ms(true, f8, H, 32, 8, 128, n, reps);
      std::printf("%s q|k|v n=%d: cuBLASLt + rope_split_q8 %.3f ms, RoPE in the GEMM %.3f ms (%.0f T/s): %.3fx\n", what,
                  n, rl, rf, 2.0 * n * H * 6144 / 1e9 / rf, rl / rf);
    }
  }
}

}  // namespace
}  // namespace qt
