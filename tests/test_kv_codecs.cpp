// KV-cache codecs, each against its definition or theory:
//  * Lloyd-Max codebooks against published tables (Gaussian: Max 1960; Laplacian: Paez & Glisson
//    1972; the coordinate of a uniform point on the sphere, TurboQuant's f_d, as √d·c);
//  * rotations are orthogonal; every codec's bits per element against its layout (d = 64);
//  * the codecs' fast loops (whole-byte packing, projections, sign expansion) against plain
//    definitions at every kernel level;
//  * reconstruction error against the quantizers' theory (TurboQuant d·MSE of f_d, RVQ's
//    two-stage MSE), unbiasedness of the QJL / TurboQuant_prod inner-product estimators;
//  * bad specs: UserError.
#include <cmath>
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "formats/error.h"
#include "libquant/cpu_features.h"
#include "libquant/kv/attend_kernels.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/lloyd_max.h"
#include "libquant/kv/random.h"
#include "tests/support.h"

namespace qt {
namespace {

namespace fs = std::filesystem;
using namespace qt::kv;

void expect_table(const Codebook& cb, const std::vector<double>& pos, double tol, const char* what) {
  const int L = int(cb.centroids.size());
  ASSERT_EQ(size_t(L / 2), pos.size()) << what;
  for (size_t i = 0; i < pos.size(); ++i) {
    EXPECT_NEAR(cb.centroids[L / 2 + i], pos[i], tol) << what << " centroid " << i;
    EXPECT_NEAR(cb.centroids[L / 2 - 1 - i], -pos[i], tol) << what << " mirrored " << i;
  }
}

TEST(LloydMax, GaussianMatchesPublishedTable) {  // Max 1960
  expect_table(lloyd_max(Density::Gaussian, 2), {0.7978846}, 1e-6, "b=1");
  expect_table(lloyd_max(Density::Gaussian, 4), {0.4527800, 1.5104176}, 1e-6, "b=2");
  expect_table(lloyd_max(Density::Gaussian, 8), {0.2450942, 0.7560053, 1.3439093, 2.1519457}, 1e-6, "b=3");
  const Codebook b4 = lloyd_max(Density::Gaussian, 16);
  expect_table(b4, {0.1283950, 0.3880483, 0.6567591, 0.9423405, 1.2562312, 1.6180464, 2.0690172, 2.7325896}, 1e-6,
               "b=4");
  EXPECT_NEAR(b4.thresholds[8], 0.2582217, 1e-6);
  EXPECT_NEAR(b4.thresholds[14], 2.4008034, 1e-6);
  const double mse[] = {0.36338023, 0.11748185, 0.03454776, 0.00950101};
  for (int b = 1; b <= 4; ++b) EXPECT_NEAR(lloyd_max(Density::Gaussian, 1 << b).mse, mse[b - 1], 2e-7) << b;
}

TEST(LloydMax, LaplacianMatchesPublishedTable) {  // Paez & Glisson 1972, unit variance
  const Codebook b2 = lloyd_max(Density::Laplacian, 4);
  expect_table(b2, {0.4197557, 1.8339693}, 1e-6, "b=2");
  EXPECT_NEAR(b2.thresholds[2], 1.1268625, 1e-6);
  EXPECT_NEAR(b2.mse, 0.17619488, 1e-6);
  const Codebook b3 = lloyd_max(Density::Laplacian, 8);
  expect_table(b3, {0.2334009, 0.8329618, 1.6724733, 3.0866868}, 1e-6, "b=3");
  EXPECT_NEAR(b3.mse, 0.05447599, 1e-6);
  EXPECT_NEAR(lloyd_max(Density::Laplacian, 2).mse, 0.5, 1e-6);
}

TEST(LloydMax, SphereCoordinateMatchesPublishedTable) {  // as √d·c
  for (auto [d, tab, dmse] :
       {std::tuple{64,
                   std::vector<std::vector<double>>{{0.8010},
                                                    {0.4521, 1.5000},
                                                    {0.2438, 0.7507, 1.3293, 2.1113},
                                                    {0.1274, 0.3847, 0.6505, 0.9319, 1.2394, 1.5908, 2.0233, 2.6464}},
                   std::vector<double>{0.3584, 0.1145, 0.0334, 0.0091}},
        std::tuple{128,
                   std::vector<std::vector<double>>{{0.7994},
                                                    {0.4525, 1.5052},
                                                    {0.2444, 0.7533, 1.3366, 2.1315},
                                                    {0.1279, 0.3864, 0.6536, 0.9371, 1.2478, 1.6043, 2.0459, 2.6889}},
                   std::vector<double>{0.3609, 0.1160, 0.0340, 0.0093}}}) {
    for (int b = 1; b <= 4; ++b) {
      Codebook cb = lloyd_max(Density::Sphere, 1 << b, d);
      for (double& c : cb.centroids) c *= std::sqrt(double(d));
      expect_table(cb, tab[b - 1], 6e-5, "sphere");
      EXPECT_NEAR(d * cb.mse, dmse[b - 1], 6e-5) << "d=" << d << " b=" << b;
    }
  }
}

TEST(LloydMax, PolarAngleCodebookIsSymmetricAboutQuarterPi) {
  // sin^k(2ψ) on [0, π/2] is symmetric about π/4: so is its quantizer, and with 2 levels the
  // centroids are the half-interval means, computable in closed form for level 2 (k = 1):
  // E[ψ | ψ < π/4] under sin(2ψ) = ∫ψ sin2ψ / ∫ sin2ψ over [0, π/4] = (1/4) / (1/2) = 1/2.
  const Codebook l2 = lloyd_max(Density::PolarAngle, 2, 2);
  EXPECT_NEAR(l2.centroids[0], 0.5, 1e-7);
  EXPECT_NEAR(l2.centroids[1], M_PI / 2 - 0.5, 1e-7);
  const Codebook l4 = lloyd_max(Density::PolarAngle, 4, 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(l4.centroids[i] + l4.centroids[3 - i], M_PI / 2, 1e-7);
}

TEST(Rotation, OrthogonalAndInvertible) {
  std::mt19937 g(1);
  std::normal_distribution<float> n;
  for (const char* kind : {"wht", "dense"}) {
    Rotation r(kind, 64, 7);
    std::vector<float> x(64), y(64), z(64);
    for (float& v : x) v = n(g);
    r.apply(x.data(), y.data());
    r.inverse(y.data(), z.data());
    double nx = 0, ny = 0;
    for (int i = 0; i < 64; ++i) {
      nx += x[i] * x[i], ny += y[i] * y[i];
      EXPECT_NEAR(z[i], x[i], 1e-5) << kind;
    }
    EXPECT_NEAR(nx, ny, 1e-4 * nx) << kind;
  }
  EXPECT_THROW(Rotation("wht", 48, 1), UserError);  // not a power of two: refused, dense named
  Rotation dense("dense", 48, 1);
  EXPECT_EQ(dense.dim(), 48);
}

KVContext ctx64() {
  KVContext c;
  c.head_dim = 64;
  return c;
}
std::unique_ptr<Codec> codec(const std::string& spec, Side s = Side::Key, const KVContext& c = ctx64()) {
  return make_codec(parse_kv_spec(spec, "test"), s, c);
}

// The codecs' whole-byte fast paths (pack_codes, unpack_codes, codebook_indices) against the
// bit-by-bit and threshold-by-threshold scalar definitions, at every width and at offsets that
// are and are not byte aligned, with lengths that leave a tail.
TEST(KvCodecs, FastPackingMatchesBitByBit) {
  std::mt19937 rng(7);
  for (int bits = 1; bits <= 8; ++bits)
    for (int64_t bit0 : {0, 8, 24, 3})
      for (int n : {64, 37}) {
        std::vector<uint8_t> codes(n), fast(96, 0), slow(96, 0), back(n);
        for (auto& c : codes) c = uint8_t(rng() & ((1u << bits) - 1u));
        pack_codes(fast.data(), bit0, n, bits, codes.data());
        for (int i = 0; i < n; ++i) put_bits_at(slow.data(), bit0 + int64_t(i) * bits, bits, codes[i]);
        EXPECT_EQ(fast, slow) << "bits " << bits << " offset " << bit0 << " n " << n;
        unpack_codes(fast.data(), bit0, n, bits, back.data());
        EXPECT_EQ(back, codes) << "bits " << bits << " offset " << bit0 << " n " << n;
      }
  const std::vector<float> t = {-1.5f, -0.5f, 0.0f, 0.25f, 1.0f};
  std::vector<float> x = {-2, -1.5f, -1, -0.5f, 0, 0.1f, 0.25f, 0.5f, 1, 3};
  std::vector<uint8_t> idx(x.size());
  codebook_indices(t.data(), int(t.size()), x.data(), int(x.size()), idx.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(idx[i], codebook_index(t.data(), int(t.size()), x[i])) << x[i];
}

// The sketching codecs' vector loops against plain definitions, at widths that leave tails
// (m not a multiple of 64 or of 8), at every kernel level this machine has.
TEST(KvKernels, ProjectionAndSignExpansionMatchDefinitions) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (KernelLevel lvl : {KernelLevel::Scalar, KernelLevel::AVX2, KernelLevel::AVX512}) {
    if (lvl > max_kernel_level()) continue;
    set_kernel_level(lvl);
    const AttendKernels& K = attend_kernels();
    for (int m : {8, 64, 100, 200}) {
      const int d = 64, n = 3;
      std::vector<float> A(size_t(m) * d), x(size_t(n) * d), y(size_t(n) * m);
      for (auto& v : A) v = nd(rng);
      for (auto& v : x) v = nd(rng);
      const std::vector<float> At = transposed(A, m, d);
      K.project_rows(x.data(), d, n, At.data(), d, m, y.data(), m);
      for (int r = 0; r < n; ++r)
        for (int c = 0; c < m; ++c) {
          double want = 0, mag = 0;
          for (int i = 0; i < d; ++i)
            want += double(A[size_t(c) * d + i]) * x[size_t(r) * d + i],
                mag += std::abs(double(A[size_t(c) * d + i]) * x[size_t(r) * d + i]);
          EXPECT_NEAR(y[size_t(r) * m + c], want, 1e-5 * mag) << "level " << int(lvl) << " m " << m;
        }
      const int ms = m + 5;  // leaves a tail of 1..5 signs after the whole bytes
      std::vector<uint8_t> bits2(size_t((ms + 7) / 8));
      for (auto& b : bits2) b = uint8_t(rng());
      std::vector<float> s(static_cast<size_t>(ms));
      K.expand_signs(bits2.data(), ms, 0.5f, s.data());
      for (int k = 0; k < ms; ++k)
        EXPECT_EQ(s[size_t(k)], (bits2[size_t(k >> 3)] >> (k & 7)) & 1 ? -0.5f : 0.5f) << "m " << ms << " k " << k;
    }
  }
  set_kernel_level(max_kernel_level());
}

// docs/spec/kv-methods.md §Bits per element at a glance, d = 64 (fp16 side data: 16/64 per norm).
TEST(KvCodecs, BitsPerElementAsPublished) {
  struct Case {
    const char* spec;
    Side side;
    double bits;
  } cases[] = {
      {"kivi:bits=2", Side::Key, 3.0},
      {"kivi:bits=4", Side::Key, 5.0},
      {"kivi:bits=2", Side::Value, 3.0},
      {"affine:bits=4,group=64", Side::Key, 4.5},
      {"affine:bits=8,group=32", Side::Key, 9.0},
      {"turboquant_mse:bits=3", Side::Key, 3.25},
      {"turboquant_mse:bits=2.5", Side::Key, 2.75},
      {"turboquant_prod:bits=3", Side::Key, 3.5},
      {"qjl", Side::Key, 1.25},
      {"rvq:bits=1", Side::Key, 2.25},
      {"rvq:bits=2", Side::Key, 4.25},
      {"polar:bits=4", Side::Key, 3.875},
  };
  for (auto& c : cases) EXPECT_DOUBLE_EQ(codec(c.spec, c.side)->bits_per_element(), c.bits) << c.spec;
}

// Mean of ‖x − x̂‖² / ‖x‖² over random Gaussian vectors (rotation-invariant inputs).
double rel_mse(const Codec& c, int n = 2000, uint32_t seed = 3) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  const int D = c.head_dim(), G = c.token_group();
  std::vector<float> x(size_t(G) * D), xh(D);
  std::vector<uint8_t> codes(c.group_bytes());
  double sum = 0;
  int cnt = 0;
  for (int i = 0; i < n / G; ++i) {
    for (float& v : x) v = nd(g);
    c.encode(x.data(), D, codes.data());
    for (int t = 0; t < G; ++t) {
      c.reconstruct(codes.data(), t, xh.data());
      double e = 0, nn = 0;
      for (int d = 0; d < D; ++d)
        e += (x[t * D + d] - xh[d]) * (x[t * D + d] - xh[d]), nn += x[t * D + d] * x[t * D + d];
      sum += e / nn;
      ++cnt;
    }
  }
  return sum / cnt;
}

TEST(KvCodecs, TurboQuantMseMatchesTheory) {
  // Unit vectors rotated: each coordinate follows f_d, so the error is d·MSE(f_d, b) (docs/spec/lloyd-max.md).
  const double dmse[] = {0.3584, 0.1145, 0.0334, 0.0091};
  for (int b = 1; b <= 4; ++b)
    for (const char* rot : {"wht", "dense"}) {
      const double e = rel_mse(*codec(fmt::format("turboquant_mse:bits={},rot={}", b, rot)));
      EXPECT_NEAR(e, dmse[b - 1], 0.06 * dmse[b - 1]) << "b=" << b << " " << rot;
    }
  // 2.5 bits: half the coordinates at 3, half at 2.
  EXPECT_NEAR(rel_mse(*codec("turboquant_mse:bits=2.5")), (0.1145 + 0.0334) / 2, 0.004);
}

TEST(KvCodecs, RvqMatchesTwoStageMse) {
  // docs/spec/kv-methods.md §RVQ: 0.134 / 0.026 / 0.0027 for Gaussian coordinates with the
  // variance-matched Laplacian.
  // At d = 64 the rotated coordinates follow f_d (lighter tails than the Gaussian), so the
  // error lands a little below: within −15 % … +5 %.
  const double want[] = {0.134, 0.026, 0.0027};
  for (int b = 1; b <= 3; ++b) {
    const double e = rel_mse(*codec(fmt::format("rvq:bits={}", b)));
    EXPECT_GT(e, 0.85 * want[b - 1]) << b;
    EXPECT_LT(e, 1.05 * want[b - 1]) << b;
  }
}

TEST(KvCodecs, AffineAndKiviErrorWithinHalfAStep) {
  std::mt19937 g(5);
  std::normal_distribution<float> nd;
  for (const char* spec : {"affine:bits=4,group=32", "affine:bits=2,group=64", "kivi:bits=2"})
    for (Side side : {Side::Key, Side::Value}) {
      auto c = codec(spec, side);
      const int G = c->token_group(), D = 64;
      std::vector<float> x(size_t(G) * D), xh(D);
      for (float& v : x) v = nd(g);
      std::vector<uint8_t> codes(c->group_bytes());
      c->encode(x.data(), D, codes.data());
      const int bits = spec[std::string(spec).find("bits=") + 5] - '0';
      for (int t = 0; t < G; ++t) {
        c->reconstruct(codes.data(), t, xh.data());
        for (int d = 0; d < D; ++d) {
          // the group's range over (2^b − 1) steps, half a step of error (+ fp16 rounding of scale/min)
          float mn = 1e9, mx = -1e9;
          if (c->token_group() > 1) {
            for (int u = 0; u < G; ++u) mn = std::min(mn, x[u * D + d]), mx = std::max(mx, x[u * D + d]);
          } else {
            const int gs = std::string(spec).find("group=64") != std::string::npos ? 64 : 32;
            for (int u = d / gs * gs; u < (d / gs + 1) * gs; ++u)
              mn = std::min(mn, x[t * D + u]), mx = std::max(mx, x[t * D + u]);
          }
          const float step = (mx - mn) / float((1 << bits) - 1);
          EXPECT_LE(std::fabs(xh[d] - x[t * D + d]), 0.5f * step * 1.01f + 2e-3f) << spec;
        }
      }
    }
}

// ⟨q, x̃⟩ − ⟨q, x⟩ over many vectors and many draws of the random matrices (the estimators
// are unbiased over S, not for one fixed S): its mean is ~0, its spread as the theory says.
void estimator_stats(const std::string& spec, double* bias_in_sd, double* var) {
  std::mt19937 g(11);
  std::normal_distribution<float> nd;
  const int D = 64, seeds = 400, per_seed = 10;
  std::vector<float> x(D), q(D), xh(D);
  for (float& v : q) v = nd(g);
  double qn = 0;
  for (float v : q) qn += v * v;
  for (float& v : q) v /= float(std::sqrt(qn));  // ‖q‖ = 1
  double s = 0, s2 = 0;
  for (int sd = 0; sd < seeds; ++sd) {
    KVContext c = ctx64();
    c.seed = 1000 + sd;
    auto cd = codec(spec, Side::Key, c);
    std::vector<uint8_t> codes(cd->group_bytes());
    for (int i = 0; i < per_seed; ++i) {
      for (int d = 0; d < D; ++d) x[d] = nd(g) / 8.0f + 0.7f * q[d];  // ⟨q, x⟩ ≈ 0.6 after normalizing
      double xn = 0;
      for (float v : x) xn += v * v;
      for (float& v : x) v /= float(std::sqrt(xn));
      cd->encode(x.data(), D, codes.data());
      cd->reconstruct(codes.data(), 0, xh.data());
      double e = 0;
      for (int d = 0; d < D; ++d) e += q[d] * (xh[d] - x[d]);
      s += e, s2 += e * e;
    }
  }
  const int n = seeds * per_seed;
  const double mean = s / n, v = s2 / n - mean * mean;
  *bias_in_sd = std::fabs(mean) / std::sqrt(v / n);
  *var = v;
}

TEST(KvCodecs, QjlAndProdEstimatorsAreUnbiased) {
  double z, var;
  // TurboQuant_prod: D_prod ≤ √3·π²/d · 4^(−b) for unit q, x (docs/spec/kv-methods.md §TurboQuant).
  for (int b = 2; b <= 4; ++b) {
    estimator_stats(fmt::format("turboquant_prod:bits={}", b), &z, &var);
    EXPECT_LT(z, 4.0) << "prod bias, b=" << b;
    EXPECT_LT(var, std::sqrt(3.0) * M_PI * M_PI / 64 * std::pow(4.0, -b)) << "prod variance, b=" << b;
  }
  // QJL with m = d: variance ≈ (π/2 − 1)/m for unit vectors (QJL Lemma 3's leading term).
  estimator_stats("qjl", &z, &var);
  EXPECT_LT(z, 4.0);
  EXPECT_NEAR(var, (M_PI / 2 - 1) / 64, 0.35 * (M_PI / 2 - 1) / 64);
  // The biased 1-bit MSE quantizer shrinks inner products by 2/π: its bias is plainly visible.
  estimator_stats("turboquant_mse:bits=1", &z, &var);
  EXPECT_GT(z, 4.0);
}

TEST(KvCodecs, PolarRoundTripsItsOwnReconstruction) {
  // Without a rotation the domain is head space: a decoded vector has every angle at a
  // centroid, so encoding it again gives the same codes (angles are recovered exactly enough
  // to land in their own cells).
  auto c = codec("polar:bits=4,rot=none");
  std::mt19937 g(2);
  std::normal_distribution<float> nd;
  std::vector<float> x(64), xh(64);
  std::vector<uint8_t> a(c->group_bytes()), b(c->group_bytes());
  for (int it = 0; it < 50; ++it) {
    for (float& v : x) v = nd(g);
    c->encode(x.data(), 64, a.data());
    c->reconstruct(a.data(), 0, xh.data());
    c->encode(xh.data(), 64, b.data());
    EXPECT_EQ(a, b);
  }
  EXPECT_LT(rel_mse(*codec("polar:bits=4")), 0.05);  // 3.875 bits: between TurboQuant's 3 and 4 bit
  EXPECT_GT(rel_mse(*codec("polar:bits=4")), 0.0091);
}

TEST(KvCodecs, BadSpecsAreUserErrors) {
  for (const char* s : {"nosuch", "turboquant_mse:bits=5", "kivi:bits=1", "affine:group=48", "affine:group=128",
                        "rvq:bits=4", "qjl:bits=1,group=32", "turboquant_mse:rot=fft", "polar:bits=x"})
    EXPECT_THROW(codec(s), UserError) << s;
  EXPECT_THROW(parse_kv_spec("kivi:bits", "t"), UserError);
  EXPECT_THROW(parse_kv_spec(":bits=2", "t"), UserError);
}

}  // namespace
}  // namespace qt
