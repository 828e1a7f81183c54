// The descent after GPTQ (calib/gptq_refine.cpp) against independent references: the output
// error recomputed from scratch in double, a brute force over every E4M3 block scale and every
// E2M1 code (no single change lowers the converged error), and GPTQ with and without it.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "calib/gptq.h"
#include "calib/gptq_refine.h"
#include "libquant/schemes/e4m3.h"
#include "libquant/schemes/grid.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

namespace qt {
namespace {

// Σ_r (w_r − ŵ_r)ᵀ H (w_r − ŵ_r) in double, one element at a time.
double reference_error(const SchemeGrid& grid, const std::vector<float>& w, int rows, int cols, int gl,
                       const std::vector<float>& H, const std::vector<int16_t>& q, const std::vector<GroupParams>& P) {
  double f = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<double> e(static_cast<size_t>(cols));
    for (int j = 0; j < cols; ++j)
      e[j] = double(w[size_t(r * cols + j)]) - grid.value(q[size_t(r * cols + j)], P[size_t(r * (cols / gl) + j / gl)]);
    for (int a = 0; a < cols; ++a)
      for (int b = 0; b < cols; ++b) f += e[a] * double(H[size_t(a * cols + b)]) * e[b];
  }
  return f;
}

struct Case {
  int rows, cols;
  std::vector<float> w, H;  // H = XᵀX of correlated inputs with a few loud channels, dampened
};

Case random_case(uint32_t seed, int rows, int cols, int tokens) {
  Case c{rows, cols, test::randn(size_t(rows * cols), seed, 0.02f), std::vector<float>(size_t(cols * cols), 0.0f)};
  std::vector<float> X = test::randn(size_t(tokens * cols), seed + 1, 1.0f);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> loud(static_cast<size_t>(cols));
  for (float& s : loud) s = u(rng) < 0.05f ? 20.0f : 0.5f + u(rng);
  for (int t = 0; t < tokens; ++t) {
    float* x = &X[size_t(t * cols)];
    for (int j = cols - 1; j > 0; --j) x[j] = 0.6f * x[j - 1] + 0.8f * x[j];  // neighbours correlated
    for (int j = 0; j < cols; ++j) x[j] *= loud[j];
  }
  for (int t = 0; t < tokens; ++t)
    for (int a = 0; a < cols; ++a)
      for (int b = 0; b < cols; ++b) c.H[size_t(a * cols + b)] += X[size_t(t * cols + a)] * X[size_t(t * cols + b)];
  double tr = 0;
  for (int j = 0; j < cols; ++j) tr += c.H[size_t(j * cols + j)];
  for (int j = 0; j < cols; ++j) c.H[size_t(j * cols + j)] += float(0.01 * tr / cols);
  return c;
}

// RTN codes and scales of the package's rule under `grid`.
void rtn(const SchemeGrid& grid, const Case& c, int gl, std::vector<int16_t>& q, std::vector<GroupParams>& P) {
  q.assign(size_t(c.rows * c.cols), 0);
  P.assign(size_t(c.rows * (c.cols / gl)), {});
  for (int r = 0; r < c.rows; ++r)
    for (int g = 0; g < c.cols / gl; ++g) {
      const float* v = &c.w[size_t(r * c.cols + g * gl)];
      const GroupParams p = grid.stored(grid.fit_rtn(v, gl));
      P[size_t(r * (c.cols / gl) + g)] = p;
      for (int k = 0; k < gl; ++k) q[size_t(r * c.cols + g * gl + k)] = int16_t(grid.code(v[k], p));
    }
}

SchemeGrid nvfp4_grid(const Case& c) {
  return SchemeGrid(test::scheme_params("nvfp4", 4, 16, DType::BF16)).for_weight(c.w.data(), c.rows, c.cols);
}

TEST(GptqRefine, LowersTheOutputErrorItReportsAndStoresValidScales) {
  const Case c = random_case(3, 8, 64, 256);
  const SchemeGrid grid = nvfp4_grid(c);
  std::vector<int16_t> q;
  std::vector<GroupParams> P;
  rtn(grid, c, 16, q, P);
  const double f0 = reference_error(grid, c.w, c.rows, c.cols, 16, c.H, q, P);
  const calib::RefineResult res =
      calib::refine_codes_and_scales(grid, c.w.data(), c.rows, c.cols, 16, c.H.data(), q.data(), P.data(), 3);
  const double f1 = reference_error(grid, c.w, c.rows, c.cols, 16, c.H, q, P);
  EXPECT_NEAR(res.before, f0, 1e-4 * f0);
  EXPECT_NEAR(res.after, f1, 1e-4 * f0);  // the incremental bookkeeping matches a recomputation
  EXPECT_NEAR(calib::output_error(grid, c.w.data(), c.rows, c.cols, 16, c.H.data(), q.data(), P.data()), f1, 1e-4 * f0);
  EXPECT_LT(f1, 0.9 * f0);
  EXPECT_GT(res.codes_changed, 0);
  EXPECT_GT(res.scales_changed, 0);
  for (const GroupParams& p : P) EXPECT_EQ(grid.stored(p).scale, p.scale);  // an E4M3 code over gs
  for (int16_t v : q) EXPECT_TRUE(v >= grid.qmin() && v <= grid.qmax());
}

TEST(GptqRefine, ConvergesToWhereNoSingleCodeOrE4m3ScaleDoesBetter) {
  const Case c = random_case(11, 3, 32, 96);
  const SchemeGrid grid = nvfp4_grid(c);
  const float gs = grid.params().global_scale;
  std::vector<int16_t> q;
  std::vector<GroupParams> P;
  rtn(grid, c, 16, q, P);
  calib::refine_codes_and_scales(grid, c.w.data(), c.rows, c.cols, 16, c.H.data(), q.data(), P.data(), 100);
  const double f = reference_error(grid, c.w, c.rows, c.cols, 16, c.H, q, P);
  const double tol = 1e-6 * f;
  for (size_t j = 0; j < q.size(); ++j) {  // every code of every weight
    const int16_t keep = q[j];
    for (int v = grid.qmin(); v <= grid.qmax(); ++v) {
      q[j] = int16_t(v);
      EXPECT_GE(reference_error(grid, c.w, c.rows, c.cols, 16, c.H, q, P), f - tol) << "weight " << j << " code " << v;
    }
    q[j] = keep;
  }
  for (size_t g = 0; g < P.size(); ++g) {  // every positive E4M3 code as every block's scale
    const GroupParams keep = P[g];
    for (int code = 1; code <= 126; ++code) {
      P[g] = {e4m3_to_f32(uint8_t(code)) / gs, 0.0f};
      EXPECT_GE(reference_error(grid, c.w, c.rows, c.cols, 16, c.H, q, P), f - tol)
          << "group " << g << " e4m3 " << code;
    }
    P[g] = keep;
  }
}

TEST(GptqRefine, ScaleStepAloneEqualsTheBruteForceScaleForOneGroup) {
  // One row of one group, codes fixed: the scale step's choice is the best of all E4M3 scales.
  const Case c = random_case(5, 1, 16, 64);
  const SchemeGrid grid = nvfp4_grid(c);
  const float gs = grid.params().global_scale;
  for (int start = 0; start < 4; ++start) {
    std::vector<int16_t> q;
    std::vector<GroupParams> P;
    rtn(grid, c, 16, q, P);
    // A start away from RTN's scale too (the codes stay RTN's).
    P[0].scale = grid.stored({P[0].scale * (1.0f + 0.3f * float(start)), 0.0f}).scale;
    double best = INFINITY;
    for (int code = 1; code <= 126; ++code) {
      std::vector<GroupParams> B = {{e4m3_to_f32(uint8_t(code)) / gs, 0.0f}};
      best = std::min(best, reference_error(grid, c.w, 1, 16, 16, c.H, q, B));
    }
    calib::refine_codes_and_scales(grid, c.w.data(), 1, 16, 16, c.H.data(), q.data(), P.data(), 1, true);
    EXPECT_NEAR(reference_error(grid, c.w, 1, 16, 16, c.H, q, P), best, 1e-9 * best) << "start " << start;
  }
}

TEST(GptqRefine, GptqWithTheRefinementNeverHasTheLargerOutputError) {
  for (const char* scheme : {"nvfp4", "affine"}) {
    const Case c = random_case(21, 16, 128, 512);
    const SchemeParams sp = std::string(scheme) == "nvfp4" ? test::scheme_params("nvfp4", 4, 16, DType::BF16)
                                                           : test::scheme_params("affine", 4, 32, DType::BF16);
    std::vector<float> Hraw = c.H;  // the case's H is already dampened: GPTQ dampens it again alike
    for (bool act_order : {false, true}) {
      calib::GptqOptions o;
      o.act_order = act_order;
      o.weighted_groups = true;
      const PackedTensor plain = calib::gptq_quantize(SchemeGrid(sp), c.w.data(), c.rows, c.cols, Hraw, o);
      o.refine_sweeps = 3;
      calib::RefineResult rr;
      const calib::GptqHessian h = calib::prepare_gptq_hessian(Hraw, c.cols, o);
      const PackedTensor refined = calib::gptq_quantize(SchemeGrid(sp), c.w.data(), c.rows, c.cols, h, o, nullptr, &rr);
      // The objective: the dampened H the refinement kept; the errors from the dequantized weights.
      auto err = [&](const PackedTensor& t) {
        const std::vector<float> d = dequantize_weights(t);
        double f = 0;
        for (int r = 0; r < c.rows; ++r)
          for (int a = 0; a < c.cols; ++a)
            for (int b = 0; b < c.cols; ++b)
              f += double(c.w[size_t(r * c.cols + a)] - d[size_t(r * c.cols + a)]) * h.H[size_t(a * c.cols + b)] *
                   double(c.w[size_t(r * c.cols + b)] - d[size_t(r * c.cols + b)]);
        return f;
      };
      const double e0 = err(plain), e1 = err(refined);
      EXPECT_NEAR(rr.before, e0, 1e-4 * e0) << scheme << " act_order " << act_order;
      EXPECT_NEAR(rr.after, e1, 1e-4 * e0) << scheme << " act_order " << act_order;
      EXPECT_LT(e1, e0) << scheme << " act_order " << act_order;
    }
  }
}

}  // namespace
}  // namespace qt
