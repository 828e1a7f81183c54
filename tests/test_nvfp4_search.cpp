// NVFP4's weighted scale search (calib/weighted_fit.cpp over nvfp4's listed E4M3 scales,
// libquant/schemes/nvfp4.cpp) against an independent brute force: every positive E4M3 code as
// the block scale, each value's error its distance to the nearest of the 16 values the scale
// gives; and the package's RTN choice and the factor sweep the other float rows use as bounds.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "calib/fused_global_scale.h"
#include "calib/weighted_fit.h"
#include "libquant/schemes/e2m1.h"
#include "libquant/schemes/e4m3.h"
#include "libquant/schemes/grid.h"
#include "libquant/schemes/packed_values.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

namespace qt {
namespace {

// Σ imp (v − deq)² under block scale s, each value coded as compressed-tensors codes it (E2M1
// round-to-nearest-even of v/s clamped to ±6, e2m1.h) and dequantized as the package's decompress
// (bf16 of e2m1·s).
double brute_error(const float* v, const float* imp, int n, float s) {
  double e = 0;
  for (int j = 0; j < n; ++j) {
    const double d =
        double(v[j]) - double(schemes_detail::round_to(DType::BF16, kE2M1Values[e2m1_code_clamped(v[j] / s)] * s));
    e += imp[j] * d * d;
  }
  return e;
}

struct Groups {
  std::vector<float> w, imp;
  int rows, cols;
};

// Rows of Gaussian weights, a few outliers, importances spread over three decades.
Groups random_groups(uint32_t seed, int rows, int cols) {
  Groups g{test::randn(size_t(rows * cols), seed, 0.02f), std::vector<float>(size_t(cols)), rows, cols};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : g.w)
    if (u(rng) < 0.01f) x *= 6.0f;
  for (float& x : g.imp) x = std::pow(10.0f, 3.0f * u(rng));
  return g;
}

TEST(Nvfp4Search, NeverWorseThanRtnOrTheSweepAndEqualsBruteForceInsideItsWindow) {
  const Groups g = random_groups(7, 64, 256);
  const SchemeGrid grid =
      SchemeGrid(test::scheme_params("nvfp4", 4, 16, DType::BF16)).for_weight(g.w.data(), g.rows, g.cols);
  const float gs = grid.params().global_scale;
  int unrestricted_better = 0, groups = 0, four = 0;
  for (int r = 0; r < g.rows; ++r)
    for (int c0 = 0; c0 < g.cols; c0 += 16, ++groups) {
      const float* v = &g.w[size_t(r * g.cols + c0)];
      const float* imp = &g.imp[size_t(c0)];
      float amax = 0;
      for (int j = 0; j < 16; ++j) amax = std::max(amax, std::abs(v[j]));
      const GroupParams got = calib::fit_weighted(grid, v, imp, 16);
      const double e = calib::weighted_error(grid, v, imp, 16, got);
      // The search scores what the package's rounding gives.
      EXPECT_NEAR(e, brute_error(v, imp, 16, got.scale), 1e-12 * (1 + e));
      // Stored exactly: an E4M3 code over the global scale.
      EXPECT_EQ(grid.stored(got).scale, got.scale);
      const GroupParams rtn = grid.stored(grid.fit_rtn(v, 16));
      EXPECT_LE(e, calib::weighted_error(grid, v, imp, 16, rtn));
      for (int k = 70; k <= 110; k += 2)
        EXPECT_LE(e, calib::weighted_error(grid, v, imp, 16, grid.stored({amax * float(k) / 600.0f, 0.0f})));
      // Every E4M3 scale: none inside the window (block max between 3.05 and 8.9 of the scale,
      // clear of the window's rounded ends) does better; outside it the winner is rare.
      double unrestricted = INFINITY;
      for (int code = 1; code <= 126; ++code) {
        const GroupParams s{e4m3_to_f32(uint8_t(code)) / gs, 0.0f};
        const double b = brute_error(v, imp, 16, s.scale);
        unrestricted = std::min(unrestricted, b);
        if (amax / s.scale >= 3.05f && amax / s.scale <= 8.9f) EXPECT_LE(e, b * (1 + 1e-9)) << r << " " << c0;
      }
      unrestricted_better += unrestricted < e * (1 - 1e-9);
      four += std::abs(amax / got.scale - 4.0f) < std::abs(amax / got.scale - 6.0f);
    }
  EXPECT_LT(unrestricted_better, groups / 20) << unrestricted_better << " of " << groups;
  EXPECT_GT(four, 0);  // some blocks map their max nearer 4 than 6
}

// A block whose values are multiples of its max / 4 is exact when the max maps to 4 (Four Over
// Six): the search finds that scale; RTN (max to 6) cannot represent 3/4 of the max.
TEST(Nvfp4Search, MapsTheBlockMaxToFourWhenThatIsExact) {
  std::vector<float> w(32, 0.0f);
  const float block[16] = {4, -3, 2, 1, -1.5f, 0.5f, 0, 3, -4, 2, 1, -1, 0.5f, 0, 3, -2};
  for (int j = 0; j < 16; ++j) w[size_t(j)] = block[j] * 0.25f;
  w[16] = 1.5f;  // the tensor's absmax: gs = 2688 / 1.5 = 1792, the block scale 0.25·1792 = 448
  const SchemeGrid grid = SchemeGrid(test::scheme_params("nvfp4", 4, 16, DType::BF16)).for_weight(w.data(), 1, 32);
  const std::vector<float> imp(16, 1.0f);
  const GroupParams got = calib::fit_weighted(grid, w.data(), imp.data(), 16);
  EXPECT_FLOAT_EQ(got.scale, 0.25f);
  EXPECT_EQ(calib::weighted_error(grid, w.data(), imp.data(), 16, got), 0.0);
  EXPECT_GT(calib::weighted_error(grid, w.data(), imp.data(), 16, grid.stored(grid.fit_rtn(w.data(), 16))), 0.0);
}

// The global-scale search: one of gs0·2^(−k/16), and never a larger total weighted error (every
// row, every group's fit_weighted) than the package's gs0 over the rows it scored.
TEST(Nvfp4Search, GlobalScaleSearchNeverLosesToThePackagesScale) {
  for (uint32_t seed : {3u, 11u}) {
    const Groups g = random_groups(seed, 32, 128);
    const SchemeParams p = test::scheme_params("nvfp4", 4, 16, DType::BF16);
    const float gs0 = SchemeGrid(p).for_weight(g.w.data(), g.rows, g.cols).params().global_scale;
    const float gs = calib::search_global_scale(p, gs0, {{g.w.data(), g.rows, g.cols, g.imp.data()}}, 1);
    const double k = -16.0 * std::log2(double(gs) / gs0);
    EXPECT_NEAR(k, std::round(k), 1e-4);
    EXPECT_TRUE(k > -0.5 && k < 15.5) << k;
    auto total = [&](float s) {
      SchemeParams q = p;
      q.global_scale = s;
      const SchemeGrid grid(q);
      double e = 0;
      for (int r = 0; r < g.rows; ++r)
        for (int c = 0; c < g.cols; c += 16) {
          const float* v = &g.w[size_t(r * g.cols + c)];
          e += brute_error(v, &g.imp[size_t(c)], 16, calib::fit_weighted(grid, v, &g.imp[size_t(c)], 16).scale);
        }
      return e;
    };
    EXPECT_LE(total(gs), total(gs0)) << seed;
  }
}

}  // namespace
}  // namespace qt
