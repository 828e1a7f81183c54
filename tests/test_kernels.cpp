// Dense Linear kernels (fp32 / bf16 GEMM) against the scalar reference, at every kernel level
// this CPU has. The reference (libquant/kernels/gemm_ref.cpp) is plain loops: the spec.
//
// Tolerance: fast and reference kernels sum the same exact products (bf16 × bf16 is exact in
// fp32) in different orders, so each is within γ_K·Σ|x·w| of the exact sum (γ_K ≈ K·2⁻²⁴,
// Higham's bound for any order) and they are within twice that of each other. A wrong index,
// a dropped term or a wrongly rounded operand exceeds it (CheckerCatchesOneWrongTerm).
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "libquant/cpu_features.h"
#include "libquant/kernels/bf16.h"
#include "libquant/kernels/gemm.h"
#include "libquant/linear/linear.h"
#include "libquant/parallel.h"
#include "tests/support.h"

namespace qt {
namespace {

constexpr float kGuard = 12345.678f;

struct Problem {
  int64_t m, n, k;
  bool bias;
};

struct Data {
  std::vector<float> x, w, b;
};

Data make_data(const Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  Data s;
  s.x.resize(size_t(p.m * p.k));
  s.w.resize(size_t(p.n * p.k));
  for (auto& v : s.x) v = d(rng);
  for (auto& v : s.w) v = d(rng) * 0.1f;
  if (p.bias) {
    s.b.resize(size_t(p.n));
    for (auto& v : s.b) v = d(rng);
  }
  return s;
}

// Reference output and the per-element tolerance.
void reference(const Problem& p, const Data& s, Compute c, std::vector<float>* y, std::vector<double>* tol) {
  y->assign(size_t(p.m * p.n), 0.f);
  const float* bias = p.bias ? s.b.data() : nullptr;
  std::vector<float> xr = s.x, wr = s.w;
  if (c == Compute::BF16) {
    std::vector<uint16_t> wb(s.w.size());
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = kernels::round_bf16(s.w[i]);
    kernels::gemm_ref_bf16(s.x.data(), wb.data(), bias, p.m, p.n, p.k, y->data());
    for (auto& v : xr) v = kernels::bf16_round_value(v);
    for (auto& v : wr) v = kernels::bf16_round_value(v);
  } else {
    kernels::gemm_ref_f32(s.x.data(), s.w.data(), bias, p.m, p.n, p.k, y->data());
  }
  const double u = std::ldexp(1.0, -24);
  tol->assign(y->size(), 0.0);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      double sabs = 0;
      for (int64_t k = 0; k < p.k; ++k) sabs += std::fabs(double(xr[i * p.k + k]) * double(wr[j * p.k + k]));
      double yv = std::fabs(double((*y)[i * p.n + j]));
      (*tol)[i * p.n + j] = 2.02 * double(p.k) * u * sabs + 2 * u * yv + 1e-30;
    }
}

// Runs the Linear; checks the result and that nothing outside y was written.
::testing::AssertionResult check(const Problem& p, Compute c, uint32_t seed) {
  Data s = make_data(p, seed);
  std::vector<float> ref;
  std::vector<double> tol;
  reference(p, s, c, &ref, &tol);
  auto lin = make_dense_linear(s.w.data(), p.n, p.k, p.bias ? s.b.data() : nullptr, c);
  if (lin->in_features() != p.k || lin->out_features() != p.n) return ::testing::AssertionFailure() << "wrong features";
  const size_t pad = 64;
  std::vector<float> y(size_t(p.m * p.n) + 2 * pad, kGuard);
  lin->forward(s.x.data(), p.m, y.data() + pad);
  for (size_t i = 0; i < pad; ++i)
    if (y[i] != kGuard || y[y.size() - 1 - i] != kGuard) return ::testing::AssertionFailure() << "wrote outside y";
  for (int64_t i = 0; i < p.m * p.n; ++i) {
    double d = std::fabs(double(y[pad + i]) - double(ref[i]));
    if (!(d <= tol[i]))
      return ::testing::AssertionFailure()
             << "m=" << p.m << " n=" << p.n << " k=" << p.k << " bias=" << p.bias << " at (" << i / p.n << ","
             << i % p.n << "): got " << y[pad + i] << " want " << ref[i] << " |Δ|=" << d << " tol=" << tol[i];
  }
  return ::testing::AssertionSuccess();
}

std::vector<Problem> problems() {
  std::vector<Problem> v = {
      {1, 1, 1, false},     {1, 1, 1, true},      {1, 48, 576, true},   {1, 49, 577, false},  {3, 1, 100, true},
      {9, 17, 1, true},     {8, 48, 64, false},   {6, 16, 32, true},    {7, 47, 33, false},   {17, 97, 130, true},
      {33, 200, 3, false},  {64, 96, 576, false}, {13, 50, 1536, true}, {2, 300, 257, false}, {10, 50, 4099, true},
      {3, 17, 8193, false},  // K longer than one K slice (4096)
  };
  std::mt19937 rng(7);
  for (int i = 0; i < 12; ++i) {
    Problem p{int64_t(1 + rng() % 70), int64_t(1 + rng() % 150), int64_t(1 + rng() % 400), bool(rng() % 2)};
    v.push_back(p);
  }
  return v;
}

class KernelsAtLevel : public ::testing::TestWithParam<KernelLevel> {
 protected:
  void SetUp() override {
    saved_ = kernel_level();
    set_kernel_level(GetParam());
  }
  void TearDown() override { set_kernel_level(saved_); }
  KernelLevel saved_{};
};

TEST_P(KernelsAtLevel, F32MatchesReference) {
  ASSERT_EQ(kernel_level(), GetParam());
  uint32_t seed = 1;
  for (const auto& p : problems()) EXPECT_TRUE(check(p, Compute::F32, seed++));
}

TEST_P(KernelsAtLevel, BF16MatchesReference) {
  uint32_t seed = 100;
  for (const auto& p : problems()) EXPECT_TRUE(check(p, Compute::BF16, seed++));
}

// Results do not depend on the thread count (each output is one tile's fixed-order sum).
TEST_P(KernelsAtLevel, SameBitsAtAnyThreadCount) {
  Problem p{37, 130, 300, true};
  Data s = make_data(p, 5);
  for (Compute c : {Compute::F32, Compute::BF16}) {
    auto lin = make_dense_linear(s.w.data(), p.n, p.k, s.b.data(), c);
    std::vector<float> y1(size_t(p.m * p.n)), y2(y1.size());
    const int saved = num_threads();
    set_threads(1);
    lin->forward(s.x.data(), p.m, y1.data());
    set_threads(3);
    lin->forward(s.x.data(), p.m, y2.data());
    set_threads(saved);
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4));
  }
}

// Linears that read one x in one call (q/k/v, gate/up: one conversion of x, one fork) give each
// its own forward()'s bits, for any N each has and at any thread count.
TEST_P(KernelsAtLevel, SharedInputEqualsEachForward) {
  for (Compute c : {Compute::F32, Compute::BF16})
    for (int64_t m : {1, 7, 37})
      for (int threads : {1, 2, 3}) {
        const int64_t k = 130;
        Data s0 = make_data(Problem{m, 97, k, true}, 21), s1 = make_data(Problem{m, 48, k, false}, 22),
             s2 = make_data(Problem{m, 5, k, true}, 23);
        auto l0 = make_dense_linear(s0.w.data(), 97, k, s0.b.data(), c);
        auto l1 = make_dense_linear(s1.w.data(), 48, k, nullptr, c);
        auto l2 = make_dense_linear(s2.w.data(), 5, k, s2.b.data(), c);
        const Linear* ls[] = {l0.get(), l1.get(), l2.get()};
        std::vector<float> w0(size_t(m * 97)), w1(size_t(m * 48)), w2(size_t(m * 5));
        std::vector<float> g0(w0.size(), kGuard), g1(w1.size(), kGuard), g2(w2.size(), kGuard);
        const int saved = num_threads();
        set_threads(threads);
        l0->forward(s0.x.data(), m, w0.data());
        l1->forward(s0.x.data(), m, w1.data());
        l2->forward(s0.x.data(), m, w2.data());
        float* ys[] = {g0.data(), g1.data(), g2.data()};
        forward_shared_input(ls, 3, s0.x.data(), m, ys);
        set_threads(saved);
        EXPECT_EQ(w0, g0) << "m " << m << " threads " << threads;
        EXPECT_EQ(w1, g1) << "m " << m << " threads " << threads;
        EXPECT_EQ(w2, g2) << "m " << m << " threads " << threads;
      }
}

// make_dense_linear from a tensor (converted a panel at a time while packing) gives the same bits
// as from the fp32 values of that tensor, for every float dtype.
TEST_P(KernelsAtLevel, FromTensorEqualsFromFloats) {
  for (Problem p : {Problem{5, 50, 131, true}, Problem{9, 96, 64, false}, Problem{3, 7, 4099, true}}) {
    Data s = make_data(p, 11);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      std::vector<uint8_t> bytes(s.w.size() * size_t(dtype_bits(dt) / 8));
      for (size_t i = 0; i < s.w.size(); ++i) {
        if (dt == DType::F32) std::memcpy(bytes.data() + 4 * i, &s.w[i], 4);
        const uint16_t h = dt == DType::BF16 ? f32_to_bf16(s.w[i]) : f32_to_f16(s.w[i]);
        if (dt != DType::F32) std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      Tensor t = Tensor::owned_bytes(dt, {p.n, p.k}, bytes);
      const std::vector<float> wf = to_f32(t);
      for (Compute c : {Compute::F32, Compute::BF16}) {
        auto a = make_dense_linear(t, p.bias ? s.b.data() : nullptr, c);
        auto b = make_dense_linear(wf.data(), p.n, p.k, p.bias ? s.b.data() : nullptr, c);
        std::vector<float> ya(size_t(p.m * p.n)), yb(ya.size());
        a->forward(s.x.data(), p.m, ya.data());
        b->forward(s.x.data(), p.m, yb.data());
        EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * 4))
            << dtype_name(dt) << " compute " << int(c) << " n=" << p.n << " k=" << p.k;
      }
    }
  }
}

// The bf16 panels round each weight by round_bf16's rule (ties to even, denormals to signed zero):
// weights rounded beforehand give the same bits as the raw ones.
TEST_P(KernelsAtLevel, Bf16PackRoundsAsRoundBf16) {
  Problem p{4, 50, 100, false};
  Data s = make_data(p, 13);
  for (size_t i = 0; i < s.w.size(); i += 7) s.w[i] = std::ldexp(s.w[i], -130);  // denormals
  for (size_t i = 3; i < s.w.size(); i += 11) {  // exact ties: bit 15 set, below it zero
    uint32_t u;
    std::memcpy(&u, &s.w[i], 4);
    u = (u & 0xffff0000u) | 0x8000u;
    std::memcpy(&s.w[i], &u, 4);
  }
  std::vector<float> wr(s.w.size());
  for (size_t i = 0; i < wr.size(); ++i) wr[i] = kernels::bf16_round_value(s.w[i]);
  auto a = make_dense_linear(s.w.data(), p.n, p.k, nullptr, Compute::BF16);
  auto b = make_dense_linear(wr.data(), p.n, p.k, nullptr, Compute::BF16);
  std::vector<float> ya(size_t(p.m * p.n)), yb(ya.size());
  a->forward(s.x.data(), p.m, ya.data());
  b->forward(s.x.data(), p.m, yb.data());
  EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * 4));
}

INSTANTIATE_TEST_SUITE_P(AllLevels, KernelsAtLevel, ::testing::ValuesIn(available_kernel_levels()),
                         [](const auto& info) { return std::string(kernel_level_name(info.param)); });

// The tolerance is tight enough to see a single wrong term of a long dot product.
TEST(Kernels, CheckerCatchesOneWrongTerm) {
  Problem p{4, 8, 1536, false};
  Data s = make_data(p, 9);
  std::vector<float> ref;
  std::vector<double> tol;
  reference(p, s, Compute::F32, &ref, &tol);
  int caught = 0;
  for (int64_t n = 0; n < p.n; ++n) {  // drop term k = n of row n of W
    Data t = s;
    t.w[n * p.k + n] = 0.f;
    std::vector<float> y(size_t(p.m * p.n));
    kernels::gemm_ref_f32(t.x.data(), t.w.data(), nullptr, p.m, p.n, p.k, y.data());
    for (int64_t m = 0; m < p.m; ++m)
      if (std::fabs(double(y[m * p.n + n]) - double(ref[m * p.n + n])) > tol[m * p.n + n]) ++caught;
  }
  EXPECT_GE(caught, p.m * p.n * 3 / 4);  // some products are tiny; most must be caught
}

TEST(Kernels, Bf16RoundingMatchesHardwareRule) {
  using kernels::round_bf16;
  EXPECT_EQ(round_bf16(1.0f), 0x3f80);
  EXPECT_EQ(round_bf16(-2.0f), 0xc000);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1.0); 1 + 3·2^-8 rounds up to even.
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.f, -8)), 0x3f80);
  EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.f, -8)), 0x3f82);
  EXPECT_EQ(round_bf16(std::ldexp(1.f, -130)), 0x0000);   // denormal → +0
  EXPECT_EQ(round_bf16(-std::ldexp(1.f, -130)), 0x8000);  // denormal → −0
  EXPECT_EQ(round_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(round_bf16(std::nanf("")) & 0x7fc0, 0x7fc0);
  EXPECT_EQ(round_bf16(3.4028235e38f), 0x7f80);  // rounds up past the largest bf16
}

TEST(Kernels, LevelClampsAndParses) {
  KernelLevel saved = kernel_level();
  KernelLevel l;
  EXPECT_TRUE(parse_kernel_level("avx2", &l));
  EXPECT_EQ(l, KernelLevel::AVX2);
  EXPECT_FALSE(parse_kernel_level("sse9", &l));
  set_kernel_level(KernelLevel::AMX);  // the highest level: clamped to what this CPU has
  EXPECT_EQ(kernel_level(), max_kernel_level());
  set_kernel_level(KernelLevel::Scalar);
  EXPECT_EQ(kernel_level(), KernelLevel::Scalar);
  EXPECT_STREQ(kernels::dense_kernel_name(Compute::F32), "f32-ref");
  set_kernel_level(saved);
}

// QT_KERNEL_LEVEL lowers the level for the whole process: run this binary again with it set
// and let the child check what it got (QT_EXPECT_LEVEL).
TEST(Kernels, EnvForcesLevel) {
  if (const char* want = std::getenv("QT_EXPECT_LEVEL")) {
    EXPECT_STREQ(kernel_level_name(kernel_level()), want);
    // AMX adds tile kernels for bf16 only: fp32 stays on the AVX-512 kernels there.
    const bool amx = want == std::string("amx");
    const char* fam = kernels::dense_kernel_name(amx ? Compute::BF16 : Compute::F32);
    EXPECT_NE(std::string(fam).find(want == std::string("scalar") ? "ref" : want), std::string::npos) << fam;
    return;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (KernelLevel lvl : available_kernel_levels()) {
    const char* name = kernel_level_name(lvl);
    std::string out;
    int rc = test::run_cmd(std::string("QT_KERNEL_LEVEL=") + name + " QT_EXPECT_LEVEL=" + name + " '" + self +
                               "' --gtest_filter=Kernels.EnvForcesLevel",
                           &out);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  }
}

// The f32 AVX-512 panel (k-major, NR values per k, zeros past the last row) is the rows transposed
// exactly: every shape class of its register transpose — whole 16×16 blocks, the K tail, a
// partial last panel — against the definition.
TEST(Kernels, F32PanelIsTheRowsTransposed) {
  const kernels::Family* f = kernels::family_f32_avx512();
  if (!f) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t K : {16, 37, 64, 83}) {
    const int64_t N = f->nr + 5;
    std::vector<float> w(size_t(N * K));
    for (float& v : w) v = u(rng);
    for (int64_t n0 : {int64_t(0), int64_t(f->nr)}) {
      const int cols = int(std::min<int64_t>(f->nr, N - n0));
      std::vector<float> panel(f->panel_bytes(K) / 4, 42.0f);
      f->pack_panel(w.data(), K, n0, cols, panel.data());
      for (int64_t k = 0; k < K; ++k)
        for (int j = 0; j < f->nr; ++j)
          ASSERT_EQ(panel[size_t(k * f->nr + j)], j < cols ? w[size_t((n0 + j) * K + k)] : 0.0f)
              << "K " << K << " n0 " << n0 << " k " << k << " j " << j;
    }
  }
}

}  // namespace
}  // namespace qt
