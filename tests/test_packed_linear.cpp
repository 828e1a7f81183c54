// Packed Linears (libquant/linear/packed_linear.h) against the scalar spec, reference_gemm, at every
// kernel level this machine has, on ragged shapes:
//  * int8 / int8_ct / int4 with per-token int8 activations: bit-identical to reference_gemm
//    (exact int32 sums, the same fp32 epilogue order), bias added after;
//  * the integer decode path (ActMode::None) and the weight-only schemes (affine 2–8 bit, nf4, fp4)
//    in fp32: within fp32 summation error of reference_gemm's double sums (and, for affine with
//    fp32 scales, of the token's per-group int16 rounding);
//  * weight-only with bf16 compute: within bf16 rounding of the activations and decoded weights;
//  * dequantize_row equals dequantize_weights' row bit for bit.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/error.h"
#include "libquant/cpu_features.h"
#include "libquant/kernels/affine8_gemv.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/packed_values.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

namespace {

using qt::ActMode;
using qt::DType;
using qt::PackedTensor;
using qt::SchemeParams;

struct Shape {
  int64_t n, k;
};

using qt::test::randn;
using qt::test::scheme_params;

// |x|·|w| row sums: the scale of the fp32 summation error of one output.
std::vector<double> abs_dot(const std::vector<float>& x, const std::vector<float>& w, int64_t m, int64_t n, int64_t k) {
  std::vector<double> s(size_t(m * n));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < n; ++j) {
      double a = 0;
      for (int64_t i = 0; i < k; ++i) a += std::abs(double(x[t * k + i]) * w[j * k + i]);
      s[size_t(t * n + j)] = a;
    }
  return s;
}

void check_case(const SchemeParams& p, Shape sh, int64_t m, qt::Compute compute, ActMode act, bool with_bias) {
  const int64_t n = sh.n, k = sh.k;
  auto w = randn(size_t(n * k), uint32_t(n * 131 + k + p.bits), 0.05f);
  w[0] = 0.3f;  // an outlier sets one group's scale
  auto x = randn(size_t(m * k), uint32_t(m * 7 + k));
  auto bias = randn(size_t(n), 99);
  PackedTensor pt = qt::quantize_weights(w.data(), n, k, p);
  const bool int_scheme = p.scheme == "int8" || p.scheme == "int8_ct" || p.scheme == "int4";
  const ActMode ref_mode = act == ActMode::Default ? (int_scheme ? ActMode::Int8PerToken : ActMode::None) : act;
  std::vector<float> want(size_t(m * n));
  qt::reference_gemm(pt, x.data(), m, want.data(), ref_mode);
  if (with_bias)
    for (int64_t t = 0; t < m; ++t)
      for (int64_t j = 0; j < n; ++j) want[size_t(t * n + j)] += bias[size_t(j)];

  qt::PackedLinearOptions opt;
  opt.compute = compute;
  opt.act = act;
  auto lin = qt::make_packed_linear(pt, with_bias ? bias.data() : nullptr, opt);
  ASSERT_EQ(lin->in_features(), k);
  ASSERT_EQ(lin->out_features(), n);
  std::vector<float> got(size_t(m * n), -1.0f);
  lin->forward(x.data(), m, got.data());

  const std::string what = p.scheme + " bits " + std::to_string(p.bits) + " group " + std::to_string(p.group_size) +
                           " n " + std::to_string(n) + " k " + std::to_string(k) + " m " + std::to_string(m) +
                           " kind " + lin->kind();
  if (ref_mode == ActMode::Int8PerToken) {
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << what << " at " << i;
    return;
  }
  const auto deq = qt::dequantize_weights(pt);
  const auto mag = abs_dot(x, deq, m, n, k);
  // fp32 sums of k products: a few k·2^-24 relative to Σ|x·w|; bf16 operands: 2·2^-8.
  const double rel = compute == qt::Compute::BF16 && lin->kind().find("bf16") != std::string::npos
                         ? 2.0 * std::ldexp(1.0, -8)
                         : 4.0 * double(k) * std::ldexp(1.0, -24);
  // Affine weights with fp32 scales in fp32 compute may run in int16 (affine_gemv.h for 1–3 tokens;
  // affine_i16_gemm.h for batches): the token rounded per group g to
  // d_g = max_g|x| / 32767, each value within d_g/2, so each output moves by at most
  // Σ_g d_g/2 · Σ_{j∈g} |(q_j − c)·s_g| = Σ_g d_g/2 · Σ_{j∈g} |w_j − b_g − c·s_g| (c = 2^(bits−1):
  // the kernels take the centre's share of the error from the exact group sum).
  std::vector<double> act_err(got.size(), 0.0);
  // (bf16 compute runs them too where the CPU has no AVX512-BF16: the kind then has no "-bf16")
  if (p.scheme == "affine" && (p.bits == 4 || p.bits == 8) && p.group_size % 32 == 0 && p.dtype == DType::F32 &&
      lin->kind().find("bf16") == std::string::npos && act != ActMode::None) {
    const int64_t g = p.group_size, groups = k / g;
    const float* b = pt.biases.as<float>();
    const float* sc = pt.scales.as<float>();
    const double c = double(1 << (p.bits - 1));
    for (int64_t t = 0; t < m; ++t)
      for (int64_t gi = 0; gi < groups; ++gi) {
        double amax = 0;
        for (int64_t j = gi * g; j < (gi + 1) * g; ++j) amax = std::max(amax, std::abs(double(x[t * k + j])));
        for (int64_t r = 0; r < n; ++r) {
          double sq = 0;
          for (int64_t j = gi * g; j < (gi + 1) * g; ++j)
            sq += std::abs(double(deq[r * k + j]) - b[r * groups + gi] - c * sc[r * groups + gi]);
          act_err[size_t(t * n + r)] += 1.001 * amax / 65534.0 * sq;
        }
      }
  }
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::abs(double(got[i]) - want[i]), rel * mag[i] + act_err[i] + 1e-6) << what << " at " << i;
}

class PackedLinearLevels : public ::testing::TestWithParam<qt::KernelLevel> {
 protected:
  void SetUp() override { qt::set_kernel_level(GetParam()); }
  void TearDown() override { qt::set_kernel_level(qt::max_kernel_level()); }
};

TEST_P(PackedLinearLevels, IntegerSchemesEqualReferenceBitForBit) {
  for (auto p : {scheme_params("int8", 8, 0), scheme_params("int8", 8, 64), scheme_params("int8", 8, 128),
                 scheme_params("int8_ct", 8, 0, DType::BF16), scheme_params("int8_ct", 8, 64, DType::F16),
                 scheme_params("int4", 4, 0), scheme_params("int4", 4, 128)})
    for (Shape sh : {Shape{37, 256}, Shape{16, 384}, Shape{130, 128}})
      for (int64_t m : {1, 2, 7, 9, 33, 70})  // 70: past one 64-token block of the AVX2 kernel
        check_case(p, sh, m, qt::Compute::F32, ActMode::Default, m == 7);
}

// Linears that read one x in one call (q/k/v: one quantization of x, one loop over all tiles)
// give each its own forward()'s bits, whatever N each has; a bias sends the set one by one.
TEST_P(PackedLinearLevels, SharedInputEqualsEachForward) {
  const int64_t k = 256;
  for (auto p : {scheme_params("int8", 8, 0), scheme_params("int8", 8, 64), scheme_params("int4", 4, 128)})
    for (int64_t m : {1, 9, 70})
      for (bool with_bias : {false, true}) {
        auto x = randn(size_t(m * k), uint32_t(m + 3));
        auto bias = randn(size_t(300), 7);
        std::vector<std::unique_ptr<qt::Linear>> ls;
        for (int64_t n : {130, 16, 48}) {
          auto w = randn(size_t(n * k), uint32_t(n), 0.05f);
          ls.push_back(
              qt::make_packed_linear(qt::quantize_weights(w.data(), n, k, p), with_bias ? bias.data() : nullptr));
        }
        std::vector<std::vector<float>> want(3), got(3);
        const qt::Linear* lp[3];
        float* yp[3];
        for (int i = 0; i < 3; ++i) {
          want[size_t(i)].resize(size_t(m * ls[size_t(i)]->out_features()));
          got[size_t(i)].assign(want[size_t(i)].size(), -1.0f);
          ls[size_t(i)]->forward(x.data(), m, want[size_t(i)].data());
          lp[i] = ls[size_t(i)].get();
          yp[i] = got[size_t(i)].data();
        }
        qt::forward_shared_input(lp, 3, x.data(), m, yp);
        for (int i = 0; i < 3; ++i)
          EXPECT_EQ(want[size_t(i)], got[size_t(i)]) << p.scheme << " m " << m << " linear " << i;
      }
}

TEST_P(PackedLinearLevels, IntegerDecodePathMatchesReference) {
  for (auto p : {scheme_params("int8", 8, 0), scheme_params("int8", 8, 128), scheme_params("int4", 4, 128)})
    for (int64_t m : {1, 3}) check_case(p, Shape{45, 256}, m, qt::Compute::F32, ActMode::None, m == 3);
}

// compressed-tensors W4A16 runs on the affine kernels: its Linear gives the affine view's outputs
// bit for bit (the affine kernels are checked against the reference above), and the view's
// weights, the exact products s·(u − 8) for bf16/f16 scales, are within half an ulp of the
// library's dequantized T(q·s) (bf16: 2^-8 relative, f16: 2^-11; fp32 scales: fp32 rounding).
TEST_P(PackedLinearLevels, Int4CtRunsOnTheAffineKernels) {
  for (auto p : {scheme_params("int4_ct", 4, 128, DType::BF16), scheme_params("int4_ct", 4, 32, DType::F16),
                 scheme_params("int4_ct", 4, 64)}) {
    const int64_t n = 53, k = 384;
    auto w = randn(size_t(n * k), 5, 0.05f);
    PackedTensor pt = qt::quantize_weights(w.data(), n, k, p);
    PackedTensor view = qt::int4_ct_as_affine(pt);
    const auto lib = qt::dequantize_weights(pt), ours = qt::dequantize_weights(view);
    const double half_ulp = p.dtype == DType::BF16  ? std::ldexp(1.0, -8)
                            : p.dtype == DType::F16 ? std::ldexp(1.0, -11)
                                                    : 0.0;
    // fp32 scales: s·u is rounded before −8·s is added (16 fp32 ulps of the largest scale bound it).
    const auto sc = qt::to_f32(view.scales);
    const double f32_slack =
        p.dtype == DType::F32 ? 16.0 * std::ldexp(1.0, -24) * *std::max_element(sc.begin(), sc.end()) : 0.0;
    int differ = 0;
    for (size_t i = 0; i < lib.size(); ++i) {
      ASSERT_LE(std::abs(double(lib[i]) - ours[i]), half_ulp * std::abs(double(ours[i])) + f32_slack) << i;
      differ += lib[i] != ours[i];
    }
    if (p.dtype == DType::BF16) {
      EXPECT_GT(differ, 0);  // the rounding the view leaves out is real
    }
    for (int64_t m : {1, 5, 33}) {
      auto x = randn(size_t(m * k), uint32_t(m));
      std::vector<float> a(size_t(m * n)), b(size_t(m * n));
      qt::make_packed_linear(pt, nullptr)->forward(x.data(), m, a.data());
      qt::make_packed_linear(view, nullptr)->forward(x.data(), m, b.data());
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_EQ(a[i], b[i]) << qt::dtype_name(p.dtype) << " m " << m << " at " << i;
    }
  }
}

TEST_P(PackedLinearLevels, AffineEveryBitsAndGroupMatchesReference) {
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int g : {32, 64, 128})
      for (DType dt : {DType::F32, DType::BF16})
        for (int64_t m : {1, 5, 33})
          check_case(scheme_params("affine", bits, g, dt), Shape{53, 384}, m, qt::Compute::F32, ActMode::Default,
                     m == 5);
}

// Weights large enough for several threads. One token through 4- and 8-bit affine weights with
// fp32 scales, or nf4/fp4 with blocks inside rows, runs the factored GEMVs (kernels/affine_gemv.h)
// over blocks of rows; 211 rows leave a tail of fewer than four. 200 tokens run the panel driver
// (3-bit, nf4) or the int16 GEMM (4-bit) over more panels than threads.
TEST_P(PackedLinearLevels, AffineOnThreadsMatchesReference) {
  for (int bits : {4, 8})
    for (int g : {32, 64, 128})
      for (int64_t m : {1, 2})
        check_case(scheme_params("affine", bits, g), Shape{211, 384}, m, qt::Compute::F32, ActMode::Default, m == 2);
  for (const char* s : {"nf4", "fp4"})  // the table GEMV (blocks inside rows)
    for (int b : {64, 128})
      for (int64_t m : {1, 3})
        check_case(scheme_params(s, 4, b), Shape{211, 384}, m, qt::Compute::F32, ActMode::Default, m == 3);
  for (int bits : {3, 4})
    check_case(scheme_params("affine", bits, 64), Shape{211, 384}, 200, qt::Compute::F32, ActMode::Default, true);
  // 4-/8-bit batches: the int16 GEMM (affine_i16_gemm.h) over groups of 64 rows
  // (211: a tail panel of 3 rows), token slices, and 6-row tiles with a tail (200, 7).
  for (int bits : {4, 8})
    for (int g : {32, 64, 128})
      for (int64_t m : {7, 200})
        check_case(scheme_params("affine", bits, g), Shape{211, 384}, m, qt::Compute::F32, ActMode::Default, m == 200);
  check_case(scheme_params("nf4", 4, 64), Shape{211, 384}, 200, qt::Compute::F32, ActMode::Default, false);
}

// Tokens whose int16 rounding errors all have one sign (x_j = d·(n_j + 0.45), d set by one value
// of 1 per group): uncentred, the error s·Σ q_j·r_j adds up coherently to about 3·g·d·s per group,
// above the centred bound of check_case (Σ |q_j − c|·d/2 ≈ 2·g·d·s); centred, it stays within it.
// (At the scalar level the tokens stay fp32, well inside the same bound.)
TEST_P(PackedLinearLevels, AffineInt16RoundingErrorIsCentred) {
  const int64_t n = 64, k = 256, g = 64;
  for (int bits : {4, 8}) {
    PackedTensor pt =
        qt::quantize_weights(randn(size_t(n * k), 17, 0.05f).data(), n, k, scheme_params("affine", bits, g));
    const auto deq = qt::dequantize_weights(pt);
    const float* b = pt.biases.as<float>();
    const float* sc = pt.scales.as<float>();
    const double c = double(1 << (bits - 1));
    for (int64_t m : {1, 8}) {  // the GEMV, the GEMM
      std::mt19937 rng(uint32_t(m + bits));
      std::uniform_int_distribution<int> nd(-20000, 20000);
      std::vector<float> x(size_t(m * k));
      const float d = 1.0f / 32767.0f;
      for (int64_t j = 0; j < m * k; ++j) x[size_t(j)] = j % g == 0 ? 1.0f : d * (float(nd(rng)) + 0.45f);
      std::vector<float> want(size_t(m * n)), got(size_t(m * n));
      qt::reference_gemm(pt, x.data(), m, want.data(), ActMode::None);
      qt::make_packed_linear(pt, nullptr)->forward(x.data(), m, got.data());
      for (int64_t t = 0; t < m; ++t)
        for (int64_t r = 0; r < n; ++r) {
          double bound = 0;
          for (int64_t j = 0; j < k; ++j) {
            const int64_t gi = j / g;
            bound += std::abs(double(deq[size_t(r * k + j)]) - b[r * (k / g) + gi] - c * sc[r * (k / g) + gi]) * d / 2 +
                     4.0 * double(k) * std::ldexp(1.0, -24) *
                         std::abs(double(x[size_t(t * k + j)]) * deq[size_t(r * k + j)]);
          }
          ASSERT_LE(std::abs(double(got[size_t(t * n + r)]) - want[size_t(t * n + r)]), bound)
              << "bits " << bits << " m " << m << " row " << r;
        }
    }
  }
}

// ActMode::None keeps affine's tokens in fp32 (no int16 rounding): the fp32 bound alone.
TEST_P(PackedLinearLevels, AffineFp32TokensWithinFp32Rounding) {
  for (int bits : {4, 8})
    for (int64_t m : {1, 200})
      check_case(scheme_params("affine", bits, 64), Shape{211, 384}, m, qt::Compute::F32, ActMode::None, true);
}

TEST_P(PackedLinearLevels, Bnb4BlocksSpanningRowsMatchReference) {
  // k = 200: blocks of 64 and 128 run across rows; 45·200 = 9000 is not a block multiple.
  for (const char* s : {"nf4", "fp4"})
    for (int b : {64, 128})
      for (int64_t m : {1, 6, 20})
        check_case(scheme_params(s, 4, b, DType::BF16), Shape{45, 200}, m, qt::Compute::F32, ActMode::Default, m == 6);
}

// A few tokens through 4-bit codes in groups of 64 or more with bf16 scales (MLX affine, rounded
// per weight as MLX computes them) or bf16 nf4/fp4 absmax: the lookup GEMV (kernels/lut4_gemv.h)
// at AVX-512, against the dequantized weights in double; 211 rows on the threads, groups of one
// and two chunks of 64, k = 448 an odd number of chunks.
TEST_P(PackedLinearLevels, FourBitLookupGemvMatchesReference) {
  for (int g : {64, 128})
    for (int64_t m : {1, 2, 3}) {
      check_case(scheme_params("affine", 4, g, DType::BF16), Shape{211, 384}, m, qt::Compute::F32, ActMode::Default,
                 m == 2);
      if (g == 64)
        check_case(scheme_params("affine", 4, g, DType::BF16), Shape{37, 448}, m, qt::Compute::F32, ActMode::Default,
                   m == 3);
    }
  for (const char* s : {"nf4", "fp4"})
    for (int b : {64, 128})
      for (int64_t m : {1, 2, 3})
        check_case(scheme_params(s, 4, b, DType::BF16), Shape{211, 384}, m, qt::Compute::F32, ActMode::Default, m == 3);
}

// 8-bit MLX groups with bf16 scales, one to three tokens: the VCVTNE2PS2BF16 GEMV (affine8_gemv.h)
// where the CPU has AVX512-BF16, within fp32 rounding of the bf16-rounded weights' double product.
TEST_P(PackedLinearLevels, Affine8GemvMatchesReference) {
  for (int g : {32, 64, 128})
    for (int64_t m : {1, 2, 3}) {
      check_case(scheme_params("affine", 8, g, DType::BF16), Shape{211, 384}, m, qt::Compute::F32, ActMode::Default,
                 m == 2);
      check_case(scheme_params("affine", 8, g, DType::BF16), Shape{37, 512}, m, qt::Compute::F32, ActMode::None,
                 m == 3);
    }
}

// The affine-8 kernel itself (where the CPU has AVX512-BF16): against one-hot tokens every output is
// one weight, so each of a row's weights must come out as dequantize_weights rounds it, bit for bit —
// both bf16 roundings and the token order — from the stored bf16 scales and from fp32 copies, 1–4
// tokens a call.
TEST(Affine8Gemv, OneHotTokensGiveEachWeightExactly) {
  const int64_t n = 19, k = 256;
  int tested = 0;
  for (int g : {32, 64, 128}) {
    if (!qt::kernels::affine8_gemv_supports(k, g)) continue;
    ++tested;
    auto w = randn(size_t(n * k), uint32_t(g), 0.05f);
    const PackedTensor pt = qt::quantize_weights(w.data(), n, k, scheme_params("affine", 8, g, DType::BF16));
    ASSERT_EQ(pt.scales.dtype, DType::BF16);
    const auto deq = qt::dequantize_weights(pt);
    const auto* s16 = reinterpret_cast<const uint16_t*>(pt.scales.data);
    const auto* b16 = reinterpret_cast<const uint16_t*>(pt.biases.data);
    std::vector<float> s32(size_t(n * k / g)), b32(s32.size());
    for (size_t i = 0; i < s32.size(); ++i)
      s32[i] = qt::schemes_detail::load_float(pt.scales, i), b32[i] = qt::schemes_detail::load_float(pt.biases, i);
    for (int64_t m : {4, 3})
      for (int64_t j0 = 0; j0 < k; j0 += m) {
        const int64_t tokens = std::min<int64_t>(m, k - j0);
        std::vector<float> x(size_t(tokens * k), 0.0f), xp(x.size()), y(size_t(tokens * n));
        for (int64_t t = 0; t < tokens; ++t) x[size_t(t * k + j0 + t)] = 1.0f;
        qt::kernels::affine8_prepare(x.data(), tokens, k, xp.data());
        for (bool raw : {true, false}) {
          const qt::kernels::AffineGroupScales scales{s32.data(), b32.data(), raw ? s16 : nullptr, raw ? b16 : nullptr};
          qt::kernels::affine8_rows(pt.data.data, scales, n, k, g, xp.data(), tokens, nullptr, y.data());
          for (int64_t t = 0; t < tokens; ++t)
            for (int64_t r = 0; r < n; ++r)
              ASSERT_EQ(y[size_t(t * n + r)], deq[size_t(r * k + j0 + t)])
                  << "g " << g << " row " << r << " column " << j0 + t << (raw ? " bf16" : " fp32") << " scales";
        }
      }
  }
  if (!tested) GTEST_SKIP() << "no AVX512-BF16";
}

TEST_P(PackedLinearLevels, WeightOnlyBf16ComputeWithinBf16Rounding) {
  for (auto p : {scheme_params("affine", 4, 64), scheme_params("nf4", 4, 64)})
    for (int64_t m : {4, 40}) check_case(p, Shape{70, 384}, m, qt::Compute::BF16, ActMode::Default, true);
}

// One token through bf16/f32-scale affine weights, or bf16 nf4/fp4 ones (the decode GEMV, weights
// decoded in registers) gives the bits each row of a batch of two gets (the decoded row, then the
// dot product; 4-bit groups of 64: both the lookup GEMV), on threads.
TEST_P(PackedLinearLevels, WeightOnlyOneTokenHasTheBatchBits) {
  std::vector<qt::SchemeParams> cases;
  for (int bits : {4, 8})
    for (int g : {32, 64})
      for (DType dt : {DType::F32, DType::BF16}) cases.push_back(scheme_params("affine", bits, g, dt));
  for (const char* s : {"nf4", "fp4"})
    for (int b : {64, 128}) cases.push_back(scheme_params(s, 4, b, DType::BF16));
  for (const auto& p : cases)
    for (int64_t k : {384, 448}) {
      if (k % p.group_size) continue;
      const int64_t n = 211;
      auto w = randn(size_t(n * k), 7, 0.1f), x = randn(size_t(k), 8);
      auto lin = qt::make_packed_linear(qt::quantize_weights(w.data(), n, k, p), nullptr,
                                        {qt::Compute::F32, qt::ActMode::None});
      std::vector<float> xx(x), one(static_cast<size_t>(n)), two(static_cast<size_t>(2 * n));
      xx.insert(xx.end(), x.begin(), x.end());
      lin->forward(x.data(), 1, one.data());
      lin->forward(xx.data(), 2, two.data());
      for (int64_t r = 0; r < n; ++r) {
        ASSERT_EQ(one[size_t(r)], two[size_t(r)])
            << p.scheme << " " << p.bits << "-bit g" << p.group_size << " k " << k << " row " << r;
        ASSERT_EQ(one[size_t(r)], two[size_t(n + r)]);
      }
    }
}

TEST_P(PackedLinearLevels, DequantizeRowIsTheDequantizedRow) {
  for (auto p :
       {scheme_params("affine", 3, 32, DType::BF16), scheme_params("affine", 8, 128), scheme_params("nf4", 4, 64),
        scheme_params("fp4", 4, 128), scheme_params("nf4", 4, 64, DType::BF16),
        scheme_params("fp4", 4, 128, DType::BF16), scheme_params("affine", 4, 64, DType::BF16),
        scheme_params("int8", 8, 0), scheme_params("int8_ct", 8, 64, DType::BF16), scheme_params("int4", 4, 128)}) {
    const int64_t n = 23, k = 256;
    auto w = randn(size_t(n * k), 5, 0.1f);
    PackedTensor pt = qt::quantize_weights(w.data(), n, k, p);
    const auto deq = qt::dequantize_weights(pt);
    auto lin = qt::make_packed_linear(pt, nullptr);
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      lin->dequantize_row(r, row.data());
      for (int64_t j = 0; j < k; ++j) ASSERT_EQ(row[size_t(j)], deq[size_t(r * k + j)]) << p.scheme << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, PackedLinearLevels, ::testing::ValuesIn(qt::available_kernel_levels()),
                         [](const auto& info) { return std::string(qt::kernel_level_name(info.param)); });

TEST(PackedLinear, UnknownSchemeIsAUserError) {
  PackedTensor pt = qt::quantize_weights(randn(64 * 64, 1).data(), 64, 64, scheme_params("int8", 8, 0));
  pt.params.scheme = "int3";
  EXPECT_THROW(qt::make_packed_linear(pt, nullptr), qt::UserError);
}

}  // namespace
