// The AMX tile kernels (libquant/kernels/gemm_amx_*.cpp) where the CPU has AMX; skipped elsewhere,
// and a failure there when QT_REQUIRE_AMX is set (the device run sets it, so a machine without the
// tiles, or a kernel that refused the tile permission, cannot pass for a green run).
//  * int8 W8A8: bit-identical to reference_gemm and to the AVX-512 VNNI kernel, on ragged shapes
//    (partial row and panel blocks, per-channel and grouped scales, codes at their extremes);
//  * bf16 dense: the level picks the tile family; within the same bound of the scalar reference
//    as the AVX-512 kernel (test_kernels.cpp's: the same exact products summed in another order,
//    each within γ_K·Σ|x·w| of the exact sum, Higham), and of the AVX-512 kernel's result.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "libquant/cpu_features.h"
#include "libquant/kernels/bf16.h"
#include "libquant/kernels/gemm.h"
#include "libquant/kernels/int8_amx.h"
#include "libquant/kernels/int8_vnni.h"
#include "libquant/linear/linear.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

#define QT_REQUIRE_AMX()                                                                                    \
  do {                                                                                                      \
    if (::qt::max_kernel_level() < ::qt::KernelLevel::AMX) {                                                \
      if (std::getenv("QT_REQUIRE_AMX")) FAIL() << "QT_REQUIRE_AMX is set but " << amx_missing();           \
      GTEST_SKIP() << amx_missing() << ": the AMX tests run on a CPU with AMX (the device machine's Xeon)"; \
    }                                                                                                       \
  } while (0)

namespace qt {
namespace {

std::string amx_missing() {
  const auto& f = cpu_features();
  if (!f.amx_tile || !f.amx_int8 || !f.amx_bf16) return "this CPU (or its OS) has no AMX-TILE/INT8/BF16";
  if (!f.avx512_vnni || !f.avx512_bf16) return "this CPU has AMX but not AVX512-VNNI/BF16";
  return "the kernel refused the tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM)";
}

class AmxLevel : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = kernel_level(); }
  void TearDown() override { set_kernel_level(saved_); }
  KernelLevel saved_{};
};

TEST_F(AmxLevel, DetectedAndNamed) {
  QT_REQUIRE_AMX();
  EXPECT_TRUE(cpu_features().amx_tile && cpu_features().amx_int8 && cpu_features().amx_bf16);
  EXPECT_STREQ(kernel_level_name(max_kernel_level()), "amx");
  KernelLevel l;
  ASSERT_TRUE(parse_kernel_level("amx", &l));
  EXPECT_EQ(l, KernelLevel::AMX);
  set_kernel_level(KernelLevel::AMX);
  EXPECT_STREQ(kernels::dense_kernel_name(Compute::BF16), "bf16-amx");
  set_kernel_level(KernelLevel::AVX512);  // the A/B switch: the AVX-512 kernels again
  EXPECT_STREQ(kernels::dense_kernel_name(Compute::BF16), "bf16-avx512");
}

// Codes [n, k] and scales [n, ng] of an int8 PackedTensor (F32 scales).
void run_int8(int64_t m, int64_t n, int64_t k, int group, bool extremes, uint32_t seed) {
  auto w = test::randn(size_t(n * k), seed, 0.05f);
  auto x = test::randn(size_t(m * k), seed + 1);
  if (extremes) {  // codes −128/127 on both sides: the largest int32 sums and the +128 offset's edge
    for (size_t i = 0; i < w.size(); ++i) w[i] = (i % 3 == 0) ? -1.0f : 127.0f / 128.0f;
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 == 0) ? -1.0f : 1.0f;
  }
  PackedTensor pt = quantize_weights(w.data(), n, k, test::scheme_params("int8", 8, group));
  ASSERT_EQ(pt.scales.dtype, DType::F32);
  const int64_t gl = group == 0 ? k : group;
  const auto packed = kernels::pack_int8_vnni(pt.data.as<int8_t>(), pt.scales.as<float>(), n, k, gl);
  std::vector<float> want(size_t(m * n)), amx(size_t(m * n) + 32, -7.0f), vnni(size_t(m * n));
  reference_gemm(pt, x.data(), m, want.data(), ActMode::Int8PerToken);
  kernels::gemm_int8_amx_f32(packed, x.data(), m, amx.data());
  kernels::gemm_int8_vnni_f32(packed, x.data(), m, vnni.data());
  const std::string what = "m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                           " group " + std::to_string(group);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::memcmp(&amx[i], &want[i], 4), 0) << what << " at " << i << ": " << amx[i] << " vs " << want[i];
    ASSERT_EQ(std::memcmp(&amx[i], &vnni[i], 4), 0) << what << " at " << i;
  }
  for (size_t i = want.size(); i < amx.size(); ++i) ASSERT_EQ(amx[i], -7.0f) << what << ": wrote past y";
}

TEST_F(AmxLevel, Int8TilesEqualReferenceBitForBit) {
  QT_REQUIRE_AMX();
  uint32_t seed = 1;
  for (int group : {0, 64, 128})  // the int8 scheme's group sizes
    for (int64_t n : {16, 37, 64, 130})
      for (int64_t m : {1, 15, 16, 17, 32, 33, 70}) run_int8(m, n, 512, group, false, seed++);
  run_int8(100, 300, 4096, 0, false, seed++);  // many panels and row blocks on the threads
  run_int8(40, 48, 4096, 0, true, seed++);
  run_int8(40, 48, 1024, 64, true, seed++);
}

TEST_F(AmxLevel, Int8LinearTakesTheTilesAndMatchesAvx512) {
  QT_REQUIRE_AMX();
  const int64_t m = 48, n = 96, k = 768;
  auto w = test::randn(size_t(n * k), 5, 0.05f);
  auto x = test::randn(size_t(m * k), 6);
  PackedTensor pt = quantize_weights(w.data(), n, k, test::scheme_params("int8", 8, 0));
  std::vector<float> a(size_t(m * n)), b(size_t(m * n));
  set_kernel_level(KernelLevel::AMX);
  make_packed_linear(pt, nullptr)->forward(x.data(), m, a.data());
  set_kernel_level(KernelLevel::AVX512);
  make_packed_linear(pt, nullptr)->forward(x.data(), m, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

// q/k/v and gate/up read one x: forward_shared_input takes the tiles once for all of them (one
// quantization, one loop) and must give each Linear its own forward()'s bits — here against the
// AVX-512 kernel, per channel and with groups whose k runs in several chunks.
TEST_F(AmxLevel, Int8SharedInputMatchesOneAtATime) {
  QT_REQUIRE_AMX();
  for (int group : {0, 64}) {
    const int64_t m = 70, k = 1536;
    const int64_t ns[3] = {160, 48, 33};
    auto x = test::randn(size_t(m * k), 11);
    std::vector<PackedTensor> pts;
    for (int i = 0; i < 3; ++i) {
      auto w = test::randn(size_t(ns[i] * k), 20 + uint32_t(i), 0.05f);
      pts.push_back(quantize_weights(w.data(), ns[i], k, test::scheme_params("int8", 8, group)));
    }
    std::vector<std::vector<float>> got(3), want(3);
    set_kernel_level(KernelLevel::AMX);
    std::vector<std::unique_ptr<Linear>> amx;
    for (int i = 0; i < 3; ++i) amx.push_back(make_packed_linear(pts[size_t(i)], nullptr));
    const Linear* ls[3] = {amx[0].get(), amx[1].get(), amx[2].get()};
    float* ys[3];
    for (int i = 0; i < 3; ++i) {
      got[size_t(i)].assign(size_t(m * ns[i]), -7.0f);
      ys[i] = got[size_t(i)].data();
    }
    forward_shared_input(ls, 3, x.data(), m, ys);
    set_kernel_level(KernelLevel::AVX512);
    for (int i = 0; i < 3; ++i) {
      want[size_t(i)].resize(size_t(m * ns[i]));
      make_packed_linear(pts[size_t(i)], nullptr)->forward(x.data(), m, want[size_t(i)].data());
      EXPECT_EQ(std::memcmp(got[size_t(i)].data(), want[size_t(i)].data(), want[size_t(i)].size() * 4), 0)
          << "group " << group << " matrix " << i;
    }
  }
}

struct Bf16Case {
  int64_t m, n, k;
  bool bias;
};

// y of a bf16 dense Linear at `level`.
std::vector<float> dense_bf16(KernelLevel level, const Bf16Case& c, const std::vector<float>& x,
                              const std::vector<float>& w, const std::vector<float>& b) {
  set_kernel_level(level);
  auto lin = make_dense_linear(w.data(), c.n, c.k, c.bias ? b.data() : nullptr, Compute::BF16);
  std::vector<float> y(size_t(c.m * c.n) + 32, 12345.0f);
  lin->forward(x.data(), c.m, y.data());
  for (size_t i = size_t(c.m * c.n); i < y.size(); ++i) EXPECT_EQ(y[i], 12345.0f) << "wrote past y";
  y.resize(size_t(c.m * c.n));
  return y;
}

TEST_F(AmxLevel, Bf16TilesWithinSummationBoundOfReference) {
  QT_REQUIRE_AMX();
  const std::vector<Bf16Case> cases = {{1, 1, 1, false},     {1, 48, 576, true},    {15, 33, 31, false},
                                       {16, 32, 32, true},   {17, 31, 33, false},   {32, 64, 64, true},
                                       {33, 65, 100, false}, {70, 100, 4100, true}, {5, 17, 8200, false},
                                       {64, 96, 576, true},  {1, 140, 8200, true}};
  uint32_t seed = 50;
  for (const auto& c : cases) {
    std::mt19937 rng(seed++);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> x(size_t(c.m * c.k)), w(size_t(c.n * c.k)), b(size_t(c.n));
    for (auto& v : x) v = d(rng);
    for (auto& v : w) v = d(rng) * 0.1f;
    for (auto& v : b) v = d(rng);
    std::vector<uint16_t> wb(w.size());
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = kernels::round_bf16(w[i]);
    std::vector<float> ref(size_t(c.m * c.n));
    kernels::gemm_ref_bf16(x.data(), wb.data(), c.bias ? b.data() : nullptr, c.m, c.n, c.k, ref.data());
    const auto amx = dense_bf16(KernelLevel::AMX, c, x, w, b);
    const auto avx = dense_bf16(KernelLevel::AVX512, c, x, w, b);
    const double u = std::ldexp(1.0, -24);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double sabs = 0;
        for (int64_t k = 0; k < c.k; ++k)
          sabs +=
              std::fabs(double(kernels::bf16_round_value(x[i * c.k + k])) * kernels::bf16_to_float(wb[j * c.k + k]));
        const size_t at = size_t(i * c.n + j);
        const double tol = 2.02 * double(c.k) * u * sabs + 2 * u * std::fabs(double(ref[at])) + 1e-30;
        ASSERT_LE(std::fabs(double(amx[at]) - ref[at]), tol)
            << "m " << c.m << " n " << c.n << " k " << c.k << " at (" << i << "," << j << ")";
        ASSERT_LE(std::fabs(double(amx[at]) - avx[at]), 2 * tol) << "vs AVX-512 at (" << i << "," << j << ")";
      }
  }
}

}  // namespace
}  // namespace qt
