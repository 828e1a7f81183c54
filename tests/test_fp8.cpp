// FP8 E4M3 (libquant/schemes/e4m3.h, fp8.cpp) and its Linear (libquant/linear/fp8_linear.cpp).
// References: tests/golden/schemes/fp8.safetensors, made by tests/golden/make_fp8_golden.py with
// torch's float8_e4m3fn cast and compressed-tensors 0.20.0 (the fp8 row's weights against its
// float-quantized compressor are in tests/test_schemes.cpp with the other rows' goldens).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "libquant/cpu_features.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/e4m3.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

using qt::DType;
using qt::PackedTensor;

namespace {

const qt::SafetensorsFile& golden() {
  static qt::SafetensorsFile f =
      qt::SafetensorsFile::open(qt::test::source_dir() + "/tests/golden/schemes/fp8.safetensors");
  return f;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// torch's cast, bit for bit: every bf16 bit pattern (NaN, Inf, subnormals, both signs), and in fp32
// every E4M3 value, every midpoint, one ulp either side of it and the overflow edge.
TEST(E4M3, CastEqualsTorchForEveryBf16AndEveryMidpoint) {
  for (const char* dt : {"bf16", "f32"}) {
    const std::vector<float> in = qt::to_f32(golden().get(std::string("e4m3.in.") + dt));
    const qt::Tensor& want = golden().get(std::string("e4m3.out.") + dt);
    ASSERT_EQ(want.nbytes, in.size());
    int bad = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const uint8_t got = qt::e4m3_from_f32(in[i]);
      if (got != want.data[i] && bad++ < 5)
        ADD_FAILURE() << dt << " " << in[i] << " (0x" << std::hex << bits_of(in[i]) << "): " << int(got) << " vs "
                      << int(want.data[i]) << std::dec;
    }
    EXPECT_EQ(bad, 0) << dt;
  }
  EXPECT_EQ(qt::e4m3_from_f32(448.0f), 0x7e);
  EXPECT_EQ(qt::e4m3_from_f32(464.0f), 0x7e);
  EXPECT_EQ(qt::e4m3_from_f32(-1e6f), 0xfe);  // saturated, as torch's CPU cast does
}

// Decoding every code and rounding in fp32 (the activations' branch-free path) agree with the cast.
TEST(E4M3, ValuesAndFp32RoundingAgreeWithTheCast) {
  for (int c = 0; c < 256; ++c) {
    const float v = qt::e4m3_to_f32(uint8_t(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    EXPECT_EQ(qt::e4m3_from_f32(v), c) << c;
  }
  EXPECT_EQ(qt::e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(qt::e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  // Every fp32 in ±[2^-12, 448] at a stride, and the golden's inputs within ±448.
  std::vector<float> xs = qt::to_f32(golden().get("e4m3.in.f32"));
  for (uint32_t u = bits_of(std::ldexp(1.0f, -12)); u <= bits_of(448.0f); u += 97) {
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
    xs.push_back(-f);
  }
  for (float x : xs) {
    if (!(std::abs(x) <= 448.0f)) continue;
    const float want = qt::e4m3_to_f32(qt::e4m3_from_f32(x));
    ASSERT_EQ(bits_of(qt::e4m3_round(x)), bits_of(want)) << x;
  }
}

// Per-token dynamic activations: s·q equals compressed-tensors' fake quantization bit for bit.
TEST(Fp8, ActivationsEqualCompressedTensorsFakeQuant) {
  const std::vector<float> x = qt::to_f32(golden().get("act.x")), want = qt::to_f32(golden().get("act.deq"));
  const int64_t M = golden().get("act.x").shape[0], K = golden().get("act.x").shape[1];
  std::vector<float> q(x.size()), s(static_cast<size_t>(M));
  qt::quantize_activations_fp8(x.data(), M, K, q.data(), s.data());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(qt::e4m3_round(q[i]), q[i]) << i;  // an E4M3 value
    ASSERT_EQ(bits_of(q[i] * s[i / size_t(K)]), bits_of(want[i])) << i << ": " << x[i];
  }
}

PackedTensor fp8_weight(int64_t n, int64_t k, DType dt, uint32_t seed) {
  std::vector<float> w = qt::test::randn(size_t(n * k), seed, 0.05f);
  for (int64_t j = 0; j < k; j += 29) w[size_t(j)] *= 40.0f;  // an outlier row
  return qt::quantize_weights(w.data(), n, k, qt::test::scheme_params("fp8", 8, 0, dt));
}

class Fp8Levels : public ::testing::TestWithParam<qt::KernelLevel> {
 protected:
  void SetUp() override { qt::set_kernel_level(GetParam()); }
  void TearDown() override { qt::set_kernel_level(qt::max_kernel_level()); }
};

// The Linear against reference_gemm (the exact sum in double): the same activation values and
// epilogue, so they differ only by the fp32 accumulation of the GEMM kernel, bounded by
// K·2^-24·Σ|a·q| per output, scaled. The decode slices give forward()'s bits.
TEST_P(Fp8Levels, LinearMatchesReference) {
  for (DType dt : {DType::BF16, DType::F32})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{37, 256}, {130, 576}}) {
      const PackedTensor w = fp8_weight(n, k, dt, uint32_t(n));
      std::vector<float> bias = qt::test::randn(size_t(n), 3);
      for (int64_t m : {1, 5, 33, 520}) {  // 520: the epilogue's parallel loop
        std::vector<float> x = qt::test::randn(size_t(m * k), uint32_t(m));
        x[0] = 200.0f;  // an outlier in token 0
        std::vector<float> ref(size_t(m * n)), got(size_t(m * n));
        qt::reference_gemm(w, x.data(), m, ref.data());
        for (qt::Compute compute : {qt::Compute::F32, qt::Compute::BF16}) {  // bf16 holds E4M3 values exactly
          auto lin = qt::make_packed_linear(w, bias.data(), {compute, qt::ActMode::Default});
          EXPECT_EQ(lin->kind(), "fp8");
          lin->forward(x.data(), m, got.data());
          std::vector<float> a(x.size()), sx(static_cast<size_t>(m));
          qt::quantize_activations_fp8(x.data(), m, k, a.data(), sx.data());
          const std::vector<float> sw = qt::to_f32(w.scales);
          for (int64_t t = 0; t < m; ++t)
            for (int64_t r = 0; r < n; ++r) {
              double mag = 0;
              for (int64_t j = 0; j < k; ++j)
                mag += std::abs(double(a[size_t(t * k + j)]) * qt::e4m3_to_f32(w.data.data[r * k + j]));
              const double tol = (double(k) * std::ldexp(1.0, -24) * mag + 1e-30) * sx[size_t(t)] * sw[size_t(r)] +
                                 std::ldexp(1.0, -22) * (std::abs(ref[size_t(t * n + r)]) + std::abs(bias[size_t(r)]));
              ASSERT_NEAR(got[size_t(t * n + r)] - bias[size_t(r)], ref[size_t(t * n + r)], tol)
                  << qt::dtype_name(dt) << " m " << m << " [" << t << ", " << r << "]";
            }
          if (m == 1 && lin->has_gemv_slices()) {
            std::vector<float> y(size_t(n), 0.0f);
            for (int part = 0; part < 3; ++part) lin->gemv_slice(x.data(), part, 3, y.data());
            for (int64_t r = 0; r < n; ++r) ASSERT_EQ(y[size_t(r)], got[size_t(r)]) << r;
          }
        }
      }
    }
}

// reference_gemm's FP8 path computes with the dequantized weights' values up to their rounding to
// the dtype: against an fp64 GEMM of the dequantized weights and the rounded activations.
TEST_P(Fp8Levels, ReferenceIsTheDequantizedProduct) {
  const int64_t n = 21, k = 256, m = 4;
  const PackedTensor w = fp8_weight(n, k, DType::F32, 9);
  const std::vector<float> deq = qt::dequantize_weights(w);
  std::vector<float> x = qt::test::randn(size_t(m * k), 4), a(x.size()), sx(static_cast<size_t>(m)), y(size_t(m * n));
  qt::quantize_activations_fp8(x.data(), m, k, a.data(), sx.data());
  qt::reference_gemm(w, x.data(), m, y.data());
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < n; ++r) {
      double want = 0, mag = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double p = double(a[size_t(t * k + j)]) * sx[size_t(t)] * deq[size_t(r * k + j)];
        want += p, mag += std::abs(p);
      }
      ASSERT_NEAR(y[size_t(t * n + r)], want, 4e-7 * mag) << t << " " << r;
    }
  // Weight-only (the decode path without activation rounding) is the dequantized weights' product.
  auto lin = qt::make_packed_linear(w, nullptr, {qt::Compute::F32, qt::ActMode::None});
  EXPECT_EQ(lin->kind(), "fp8-fp-act");
  std::vector<float> got(size_t(m * n)), ref(size_t(m * n));
  lin->forward(x.data(), m, got.data());
  qt::reference_gemm(w, x.data(), m, ref.data(), qt::ActMode::None);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << i;
  std::vector<float> row(static_cast<size_t>(k));
  lin->dequantize_row(3, row.data());
  for (int64_t j = 0; j < k; ++j) ASSERT_EQ(row[size_t(j)], deq[size_t(3 * k + j)]);
}

INSTANTIATE_TEST_SUITE_P(Levels, Fp8Levels, ::testing::ValuesIn(qt::available_kernel_levels()),
                         [](const ::testing::TestParamInfo<qt::KernelLevel>& i) {
                           return std::string(qt::kernel_level_name(i.param));
                         });

}  // namespace
