// The CUDA backend (libquant/cuda/) against the CPU path, which is the reference: each kernel on
// random data against the CPU op, the whole forward's logits and eval-ppl's result on a tiny
// llama against LlamaModel in bf16 with an f16 cache.
//
// GPU tests skip without a device (CI is CPU-only); on the device machine run them with
// QT_REQUIRE_GPU=1, which turns a missing device into a failure:
//   QT_REQUIRE_GPU=1 build-cuda/test_cuda
// The CLI tests run in every build: --device cuda without CUDA or without a device, and a method
// not on the GPU, are one line and exit 2.
#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <random>

#include <gtest/gtest.h>

#include "formats/checkpoint.h"
#include "libquant/cuda/backend.h"
#include "libquant/eval/perplexity.h"
#include "libquant/kernels/bf16.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/codec.h"
#include "libquant/model/llama.h"
#include "libquant/math/ops.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

namespace qt {
namespace {

#define QT_REQUIRE_GPU()                                                                \
  do {                                                                                  \
    if (cuda::device_count() == 0) {                                                    \
      if (std::getenv("QT_REQUIRE_GPU")) FAIL() << "QT_REQUIRE_GPU is set but there is no CUDA device"; \
      GTEST_SKIP() << "no CUDA device: the GPU tests run on the device machine";       \
    }                                                                                   \
  } while (0)

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}
float bf16v(float x) { return kernels::bf16_round_value(x); }
float f16v(float x) { return f16_to_f32(f32_to_f16(x)); }

TEST(Cuda, RmsNormMatchesCpu) {
  QT_REQUIRE_GPU();
  const int rows = 37, dim = 576;
  const auto x = randn(size_t(rows) * dim, 1, 2.0f), w = randn(dim, 2);
  std::vector<float> want(x.size());
  ops::rmsnorm(x.data(), dim, w.data(), want.data(), dim, rows, dim, 1e-5f);
  const auto got = cuda::testing::rmsnorm(x, w, rows, dim, 1e-5f);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)  // the same value rounded to bf16: within one bf16 step
    ASSERT_NEAR(got[i], bf16v(want[i]), std::abs(want[i]) * 0.0079f + 1e-6f) << i;
}

TEST(Cuda, RopeSplitMatchesCpu) {
  QT_REQUIRE_GPU();
  const int T = 9, chunks = 2, n = T * chunks, nh = 4, nkv = 2, hd = 16;
  const int Q = nh * hd, KV = nkv * hd, W = Q + 2 * KV;
  ModelConfig c;
  c.head_dim = hd;
  c.rope_theta = 10000.0f;
  ops::RopeTable rope(c);
  rope.ensure(T);
  std::vector<float> cs, sn;
  for (int p = 0; p < T; ++p) {
    cs.insert(cs.end(), rope.cos(p), rope.cos(p) + hd / 2);
    sn.insert(sn.end(), rope.sin(p), rope.sin(p) + hd / 2);
  }
  const auto qkv = randn(size_t(n) * W, 3);
  std::vector<float> q(size_t(n) * Q), k(size_t(n) * KV), v(size_t(n) * KV);
  for (int r = 0; r < n; ++r) {
    std::copy(&qkv[size_t(r) * W], &qkv[size_t(r) * W + Q], &q[size_t(r) * Q]);
    std::copy(&qkv[size_t(r) * W + Q], &qkv[size_t(r) * W + Q + KV], &k[size_t(r) * KV]);
    std::copy(&qkv[size_t(r) * W + Q + KV], &qkv[size_t(r) * W + W], &v[size_t(r) * KV]);
  }
  for (int ch = 0; ch < chunks; ++ch) {  // every chunk from position 0
    ops::rope(q.data() + size_t(ch) * T * Q, Q, T, nh, hd, 0, rope);
    ops::rope(k.data() + size_t(ch) * T * KV, KV, T, nkv, hd, 0, rope);
  }
  std::vector<float> want = q;
  want.insert(want.end(), k.begin(), k.end());
  want.insert(want.end(), v.begin(), v.end());
  const auto got = cuda::testing::rope_split(qkv, n, T, nh, nkv, hd, cs, sn);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], std::abs(want[i]) * 1e-3f + 1e-5f) << i;
}

TEST(Cuda, SwiGluMatchesCpu) {
  QT_REQUIRE_GPU();
  const int n = 13, F = 300;
  const auto gu = randn(size_t(n) * 2 * F, 4, 3.0f);
  std::vector<float> want(size_t(n) * F);
  for (int r = 0; r < n; ++r)
    ops::swiglu(&gu[size_t(r) * 2 * F], &gu[size_t(r) * 2 * F + F], &want[size_t(r) * F], 1, F);
  const auto got = cuda::testing::swiglu(gu, n, F);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], std::abs(want[i]) * 0.008f + 1e-6f) << i;
}

TEST(Cuda, GemmBf16MatchesDoubleReference) {
  QT_REQUIRE_GPU();
  const int out = 96, in = 200, n = 33;
  const auto w = randn(size_t(out) * in, 5), x = randn(size_t(n) * in, 6);
  const auto got = cuda::testing::gemm_bf16(w, out, in, x, n);
  ASSERT_EQ(got.size(), size_t(n) * out);
  for (int r = 0; r < n; ++r)
    for (int o = 0; o < out; ++o) {
      double ref = 0, mag = 0;
      for (int i = 0; i < in; ++i) {
        const double p = double(bf16v(w[size_t(o) * in + i])) * double(bf16v(x[size_t(r) * in + i]));
        ref += p, mag += std::abs(p);
      }
      ASSERT_NEAR(got[size_t(r) * out + o], ref, mag * 1e-5 + 1e-6) << r << "," << o;
    }
}

TEST(Cuda, AttentionMatchesCpuF16Cache) {
  QT_REQUIRE_GPU();
  const int B = 3, T = 37, nh = 4, nkv = 2, hd = 16, Q = nh * hd, KV = nkv * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  auto q = randn(size_t(B) * T * Q, 7, 2.0f), k = randn(size_t(B) * T * KV, 8, 2.0f), v = randn(size_t(B) * T * KV, 9);
  for (float& x : q) x = f16v(x);  // the GPU holds q in f16: give the CPU the same values
  KVShape s;
  s.n_layers = 1, s.n_heads = nh, s.n_kv_heads = nkv, s.head_dim = hd, s.max_ctx = T, s.scale = scale;
  auto cache = make_kv_cache("f16", s);
  std::vector<float> want(size_t(B) * T * Q);
  for (int b = 0; b < B; ++b) {
    cache->clear();
    cache->append(0, &k[size_t(b) * T * KV], &v[size_t(b) * T * KV], T, 0);
    cache->attend(0, &q[size_t(b) * T * Q], T, 0, &want[size_t(b) * T * Q]);
  }
  const auto got = cuda::testing::attention(q, k, v, B, T, nh, nkv, hd, scale);
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
  EXPECT_LT(worst, 3e-3);  // probabilities rounded to f16 on the GPU (values ~N(0,1))
}

TEST(Cuda, TokenNllMatchesCpu) {
  QT_REQUIRE_GPU();
  const int rows = 5, V = 49152;
  const auto l = randn(size_t(rows) * V, 10, 3.0f);
  const std::vector<int32_t> t = {0, 17, 49151, 1234, 30000};
  const auto got = cuda::testing::token_nll(l, rows, V, t);
  ASSERT_EQ(got.size(), size_t(rows));
  for (int r = 0; r < rows; ++r) EXPECT_NEAR(got[r], token_nll(&l[size_t(r) * V], V, t[r]), 2e-5) << r;
}

// W8A8 kernels against the CPU's W8A8 spec (schemes/scheme.h quantize_activations_int8,
// reference_gemm's epilogue): codes may differ by one where a value sits on a rounding boundary
// after a last-bit difference in the fp32 RMSNorm, nowhere by more; the int32 products are exact.
void expect_same_q8(const std::vector<int8_t>& q, const std::vector<float>& s, const std::vector<int8_t>& wq,
                    const std::vector<float>& ws) {
  ASSERT_EQ(q.size(), wq.size());
  ASSERT_EQ(s.size(), ws.size());
  for (size_t i = 0; i < s.size(); ++i) ASSERT_NEAR(s[i], ws[i], std::abs(ws[i]) * 1e-6f) << i;
  size_t off = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    ASSERT_LE(std::abs(int(q[i]) - int(wq[i])), 1) << i;
    off += q[i] != wq[i];
  }
  EXPECT_LE(off, q.size() / 1000 + 1);
}

TEST(Cuda, RmsNormQ8MatchesCpu) {
  QT_REQUIRE_GPU();
  const int rows = 21, dim = 576;
  auto x = randn(size_t(rows) * dim, 21, 2.0f);
  x[5] = 300.0f;  // an outlier channel, as real models have
  const auto w = randn(dim, 22);
  std::vector<float> y(x.size());
  ops::rmsnorm(x.data(), dim, w.data(), y.data(), dim, rows, dim, 1e-5f);
  std::vector<int8_t> wq(y.size());
  std::vector<float> ws(rows);
  quantize_activations_int8(y.data(), rows, dim, wq.data(), ws.data());
  const auto got = cuda::testing::rmsnorm_q8(x, w, rows, dim, 1e-5f);
  expect_same_q8(got.q, got.s, wq, ws);
}

TEST(Cuda, Int8GemmIsExact) {
  QT_REQUIRE_GPU();
  const int out = 80, in = 256, n = 36;
  std::mt19937 g(23);
  std::vector<int8_t> w(size_t(out) * in), x(size_t(n) * in);
  for (auto& v : w) v = int8_t(int(g() % 256) - 128);
  for (auto& v : x) v = int8_t(int(g() % 255) - 127);
  const auto got = cuda::testing::gemm_i8(w, out, in, x, n);
  ASSERT_EQ(got.size(), size_t(n) * out);
  for (int r = 0; r < n; ++r)
    for (int o = 0; o < out; ++o) {
      int64_t ref = 0;
      for (int i = 0; i < in; ++i) ref += int64_t(w[size_t(o) * in + i]) * x[size_t(r) * in + i];
      ASSERT_EQ(got[size_t(r) * out + o], ref) << r << "," << o;
    }
}

TEST(Cuda, DequantAndSwiGluQ8MatchCpu) {
  QT_REQUIRE_GPU();
  const int rows = 9, F = 136;
  std::mt19937 g(24);
  std::vector<int32_t> acc(size_t(rows) * 2 * F);
  for (auto& v : acc) v = int32_t(g() % 400001) - 200000;
  const auto sx = randn(rows, 25, 1e-3f), sw = randn(size_t(2) * F, 26, 1e-3f);
  // dequant, written and accumulated: y = sx · (sw · acc) in fp32, in this order
  const auto y0 = randn(size_t(rows) * 2 * F, 27);
  const auto w1 = cuda::testing::dequant(acc, rows, 2 * F, sx, sw, y0, false);
  const auto w2 = cuda::testing::dequant(acc, rows, 2 * F, sx, sw, y0, true);
  std::vector<float> deq(acc.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < 2 * F; ++c) {
      const size_t i = size_t(r) * 2 * F + c;
      deq[i] = sx[r] * (sw[c] * float(acc[i]));
      ASSERT_EQ(w1[i], deq[i]) << i;
      ASSERT_EQ(w2[i], y0[i] + deq[i]) << i;
    }
  // SwiGLU of the dequantized gate|up, then per-token int8
  std::vector<float> h(size_t(rows) * F);
  for (int r = 0; r < rows; ++r) ops::swiglu(&deq[size_t(r) * 2 * F], &deq[size_t(r) * 2 * F + F], &h[size_t(r) * F], 1, F);
  std::vector<int8_t> wq(h.size());
  std::vector<float> ws(rows);
  quantize_activations_int8(h.data(), rows, F, wq.data(), ws.data());
  const auto got = cuda::testing::swiglu_q8(acc, rows, F, sx, sw);
  expect_same_q8(got.q, got.s, wq, ws);
}

// Stop 27b: the W8A8 passes' vectorized kernels (the default) at the 8B shape's widths, each
// against the CPU's ops (as the tests above) and against its scalar form, bit for bit (SwiGLU +
// int8 in each exact variant, with some 1 + exp(−g) infinite; residual + RMSNorm + int8; per-token
// int8; RoPE).
TEST(Cuda, Q8VectorizedKernelsMatchScalarAndCpu) {
  QT_REQUIRE_GPU();
  std::mt19937 g(31);
  {  // SwiGLU + int8 at F = 14336
    const int rows = 5, F = 14336;
    std::vector<int32_t> acc(size_t(rows) * 2 * F);
    for (auto& v : acc) v = int32_t(g() % 4000001) - 2000000;
    for (int i = 0; i < 64; ++i) acc[g() % acc.size()] = (g() & 1) ? 2000000000 : -2000000000;  // exp(−g) = ∞
    const auto sx = randn(rows, 32, 1e-3f), sw = randn(size_t(2) * F, 33, 1e-3f);
    const auto vec = cuda::testing::swiglu_q8_form(acc, rows, F, sx, sw, true);
    const auto sca = cuda::testing::swiglu_q8_form(acc, rows, F, sx, sw, false);
    EXPECT_EQ(vec.q, sca.q);
    EXPECT_EQ(vec.s, sca.s);
    for (int v = 1; v <= 4; ++v) {  // each exact variant (QT_CUDA_SWIGLU_V) gives the scalar kernel's bits
      cuda::testing::swiglu_variant(v);
      const auto var = cuda::testing::swiglu_q8_form(acc, rows, F, sx, sw, true);
      cuda::testing::swiglu_variant(0);
      EXPECT_EQ(var.q, sca.q) << "variant " << v;
      EXPECT_EQ(var.s, sca.s) << "variant " << v;
    }
    std::vector<float> deq(acc.size()), h(size_t(rows) * F);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < 2 * F; ++c) deq[size_t(r) * 2 * F + c] = sx[r] * (sw[c] * float(acc[size_t(r) * 2 * F + c]));
    for (int r = 0; r < rows; ++r) ops::swiglu(&deq[size_t(r) * 2 * F], &deq[size_t(r) * 2 * F + F], &h[size_t(r) * F], 1, F);
    std::vector<int8_t> wq(h.size());
    std::vector<float> ws(rows);
    quantize_activations_int8(h.data(), rows, F, wq.data(), ws.data());
    expect_same_q8(vec.q, vec.s, wq, ws);
  }
  {  // residual add + RMSNorm + int8 at dim 4096, and per-token int8 of x
    const int rows = 7, dim = 4096;
    std::vector<int32_t> acc(size_t(rows) * dim);
    for (auto& v : acc) v = int32_t(g() % 4000001) - 2000000;
    const auto sx = randn(rows, 34, 1e-3f), sw = randn(dim, 35, 1e-3f), w = randn(dim, 36);
    auto x0 = randn(size_t(rows) * dim, 37, 2.0f);
    x0[9] = 300.0f;
    std::vector<float> xv = x0, xs = x0;
    const auto vec = cuda::testing::residual_rmsnorm_q8(acc, sx, sw, xv, w, rows, dim, 1e-5f, true);
    const auto sca = cuda::testing::residual_rmsnorm_q8(acc, sx, sw, xs, w, rows, dim, 1e-5f, false);
    EXPECT_EQ(xv, xs);
    EXPECT_EQ(vec.q, sca.q);  // the sum of squares in the scalar kernel's order: the same bits
    EXPECT_EQ(vec.s, sca.s);
    std::vector<float> x1 = x0, y(x0.size()), d(x0.size());
    for (size_t i = 0; i < d.size(); ++i) d[i] = sx[i / dim] * (sw[i % dim] * float(acc[i]));
    for (size_t i = 0; i < x1.size(); ++i) x1[i] += d[i];  // two loops: no contraction into an FMA
    EXPECT_EQ(xv, x1);
    ops::rmsnorm(x1.data(), dim, w.data(), y.data(), dim, rows, dim, 1e-5f);
    std::vector<int8_t> wq(y.size());
    std::vector<float> ws(rows);
    quantize_activations_int8(y.data(), rows, dim, wq.data(), ws.data());
    expect_same_q8(vec.q, vec.s, wq, ws);
    const auto qv = cuda::testing::quant_rows(x1, rows, dim, true), qs = cuda::testing::quant_rows(x1, rows, dim, false);
    EXPECT_EQ(qv.q, qs.q);
    EXPECT_EQ(qv.s, qs.s);
    quantize_activations_int8(x1.data(), rows, dim, wq.data(), ws.data());
    expect_same_q8(qv.q, qv.s, wq, ws);
  }
  {  // RoPE of the q|k|v int32 product at the 8B shape's heads (32 q, 8 kv, head_dim 128)
    const int T = 6, n = 2 * T, nh = 32, nkv = 8, hd = 128, W = (nh + 2 * nkv) * hd;
    ModelConfig c;
    c.head_dim = hd;
    c.rope_theta = 500000.0f;
    ops::RopeTable rope(c);
    rope.ensure(T);
    std::vector<float> cs, sn;
    for (int p = 0; p < T; ++p) {
      cs.insert(cs.end(), rope.cos(p), rope.cos(p) + hd / 2);
      sn.insert(sn.end(), rope.sin(p), rope.sin(p) + hd / 2);
    }
    std::vector<int32_t> acc(size_t(n) * W);
    for (auto& v : acc) v = int32_t(g() % 4000001) - 2000000;
    const auto sx = randn(n, 38, 1e-3f), sw = randn(W, 39, 1e-3f);
    const auto vec = cuda::testing::rope_split_q8(acc, sx, sw, n, T, nh, nkv, hd, cs, sn, true);
    const auto sca = cuda::testing::rope_split_q8(acc, sx, sw, n, T, nh, nkv, hd, cs, sn, false);
    ASSERT_EQ(vec.size(), sca.size());
    size_t differ = 0;
    for (size_t i = 0; i < vec.size(); ++i) differ += vec[i] != sca[i];
    EXPECT_EQ(differ, 0u);
    std::vector<float> qkv(acc.size());  // and against the dequantized product through the fp32 rope_split
    for (size_t i = 0; i < acc.size(); ++i) qkv[i] = sx[i / W] * (sw[i % W] * float(acc[i]));
    const auto ref = cuda::testing::rope_split(qkv, n, T, nh, nkv, hd, cs, sn);
    differ = 0;
    for (size_t i = 0; i < vec.size(); ++i) differ += vec[i] != ref[i];
    EXPECT_EQ(differ, 0u);
  }
}

// GemmLt::tune (timing cuBLASLt's candidates, stop 27b) keeps an algorithm whose int32 sums are exact.
TEST(Cuda, Int8GemmTunedIsExact) {
  QT_REQUIRE_GPU();
  const int out = 384, in = 512, n = 1024;
  std::mt19937 g(40);
  std::vector<int8_t> w(size_t(out) * in), x(size_t(n) * in);
  for (auto& v : w) v = int8_t(int(g() % 256) - 128);
  for (auto& v : x) v = int8_t(int(g() % 255) - 127);
  int pick = -1;
  const auto got = cuda::testing::gemm_i8_tuned(w, out, in, x, n, &pick);
  std::printf("int8 GEMM %dx%dx%d: tuned pick %d\n", out, in, n, pick);
  ASSERT_EQ(got.size(), size_t(n) * out);
  for (int r = 0; r < n; ++r)
    for (int o = 0; o < out; ++o) {
      int32_t ref = 0;
      for (int i = 0; i < in; ++i) ref += int32_t(w[size_t(o) * in + i]) * x[size_t(r) * in + i];
      ASSERT_EQ(got[size_t(r) * out + o], ref) << r << "," << o;
    }
}

// Affine decode against the CPU's dequantize_weights (mlx's formula), at widths that straddle
// bytes (3, 5, 6 bits) and not; bf16 scales (the value is bf16 already: exact) and f32 scales (the
// GPU's bf16 copy of the CPU's fp32 value).
TEST(Cuda, AffineDecodeMatchesCpu) {
  QT_REQUIRE_GPU();
  const int rows = 24, cols = 256;
  const auto w = randn(size_t(rows) * cols, 31, 0.05f);
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (DType dt : {DType::BF16, DType::F32}) {
      SchemeParams p;
      p.scheme = "affine", p.bits = bits, p.group_size = 64, p.dtype = dt;
      std::vector<float> wr(w);
      if (dt == DType::BF16)
        for (float& x : wr) x = bf16v(x);
      const PackedTensor t = quantize_weights(wr.data(), rows, cols, p);
      const std::vector<float> want = dequantize_weights(t);
      const size_t nb = size_t(rows) * cols * bits / 8;
      const std::vector<uint8_t> codes(t.data.data, t.data.data + nb);
      const auto got = cuda::testing::affine_dequant(codes, to_f32(t.scales), to_f32(t.biases), rows, cols, bits, 64,
                                                     dt == DType::BF16 ? 1 : 0);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], bf16v(want[i])) << bits << " bits, " << i;
    }
}

TEST(Cuda, KldRowsMatchCpu) {
  QT_REQUIRE_GPU();
  const int rows = 6, V = 49152;
  const auto b = randn(size_t(rows) * V, 41, 3.0f);
  auto t = b;
  const auto noise = randn(t.size(), 42, 0.3f);
  for (size_t i = 0; i < t.size(); ++i) t[i] += noise[i];
  std::copy(b.begin() + V, b.begin() + 2 * V, t.begin() + V);  // row 1: the same logits (KLD 0)
  const std::vector<int32_t> y = {3, 49151, 0, 777, 12345, 40000};
  const auto got = cuda::testing::kld_rows(b, t, rows, V, y);
  ASSERT_EQ(got.size(), size_t(rows));
  for (int r = 0; r < rows; ++r) {
    const KldToken want = kld_token(&b[size_t(r) * V], &t[size_t(r) * V], V, y[r]);
    EXPECT_NEAR(got[r].nll, want.nll, 2e-5) << r;
    EXPECT_NEAR(got[r].nll_base, want.nll_base, 2e-5) << r;
    EXPECT_NEAR(got[r].kld, want.kld, 1e-5 + 1e-4 * want.kld) << r;
    EXPECT_EQ(got[r].same_top, want.same_top) << r;
  }
  EXPECT_GT(cuda::testing::kld_rows(b, t, rows, V, y)[0].kld, 0.01);
  EXPECT_LT(std::abs(got[1].kld), 1e-9);
}

std::string tiny_dir() { return test::source_dir() + "/tests/golden/logits/tiny-llama3"; }

// The tiny llama converted with `flags` into a fresh folder named after `tag`: the folder's path,
// or "" (and a test failure with convert's output) when convert fails.
std::string convert_tiny(const std::string& tag, const std::string& flags) {
  const std::string dir = test::temp_dir(tag) + "/m";
  std::string out;
  if (test::run_cmd(test::quanttool_bin() + " convert --in " + tiny_dir() + " --out " + dir + " " + flags, &out) != 0) {
    ADD_FAILURE() << "convert " << flags << ": " << out;
    return "";
  }
  return dir;
}

std::vector<int32_t> random_ids(int n, uint32_t seed) {
  std::vector<int32_t> ids;
  std::mt19937 g(seed);
  for (int i = 0; i < n; ++i) ids.push_back(int32_t(g() % 64));
  return ids;
}
// The logits of every position of `ids` from model m with a fresh `kv` cache.
std::vector<float> model_logits(LlamaModel& m, const std::vector<int32_t>& ids, const std::string& kv) {
  const int n = int(ids.size());
  auto cache = m.make_cache(n, kv);
  std::vector<float> out(size_t(n) * m.config().vocab);
  m.forward(ids.data(), n, 0, *cache, 0, n, out.data());
  return out;
}
std::vector<float> cpu_logits(const Checkpoint& ck, Compute compute, const std::string& kv,
                              const std::vector<int32_t>& ids) {
  LlamaModel m(ck, compute);
  return model_logits(m, ids, kv);
}
double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i] - b[i]) * double(a[i] - b[i]);
  return std::sqrt(s / double(a.size()));
}

// bf16 moves this tiny model's logits (|l| up to 6.5) by up to 0.07 on the CPU already (its
// bf16 path against its f32 path), so the GPU is held to the CPU's own bf16 error: against the
// f32 forward it may be no worse than 1.5x the CPU bf16 path, and it stays within 0.1 of it.
TEST(Cuda, TinyLlamaLogitsMatchCpu) {
  QT_REQUIRE_GPU();
  const auto ids = random_ids(40, 11);
  Checkpoint a = load_checkpoint(tiny_dir());
  const auto f32 = cpu_logits(a, Compute::F32, "f32", ids), bf16 = cpu_logits(a, Compute::BF16, "f16", ids);
  cuda::GpuModel gpu(load_checkpoint(tiny_dir()));
  EXPECT_EQ(gpu.kind(), "bf16");
  const auto got = cuda::forward_logits(gpu, ids);
  ASSERT_EQ(got.size(), f32.size());
  double worst = 0, mag = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, double(std::abs(got[i] - bf16[i])));
    mag = std::max(mag, double(std::abs(f32[i])));
  }
  EXPECT_GT(mag, 1.0);  // not a degenerate comparison
  EXPECT_LT(worst, 0.1);
  const double e_gpu = rms_diff(got, f32), e_cpu = rms_diff(bf16, f32);
  EXPECT_GT(e_cpu, 0.0);
  EXPECT_LT(e_gpu, 1.5 * e_cpu + 1e-4) << "gpu " << e_gpu << " cpu bf16 " << e_cpu;
}

TEST(Cuda, TinyLlamaPerplexityMatchesCpu) {
  QT_REQUIRE_GPU();
  const auto ids = random_ids(7 * 32 + 5, 12);
  PplOptions po;
  po.ctx = 32;
  po.bos_id = 1;
  po.keep_tokens = true;
  Checkpoint a = load_checkpoint(tiny_dir());
  LlamaModel c32(a, Compute::F32), cbf(a, Compute::BF16);
  const PplResult ref = evaluate_perplexity(c32, ids, po);
  PplOptions pc = po;
  pc.kv = kv::uniform_kv_config(a.config.n_layers, kv::parse_kv_spec("f16", "kv"), kv::parse_kv_spec("f16", "kv"));
  const PplResult want = evaluate_perplexity(cbf, ids, pc);
  cuda::GpuModel gpu(load_checkpoint(tiny_dir()));
  const PplResult got = cuda::evaluate_perplexity(gpu, ids, po, 3);  // 3 + 3 + 1 chunks: a short last batch
  EXPECT_EQ(got.plan.n_chunks, 7);
  EXPECT_EQ(got.tokens_scored, want.tokens_scored);
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  ASSERT_EQ(got.running.size(), want.running.size());
  double e_gpu = 0, e_cpu = 0;
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    ASSERT_NEAR(got.tokens[i].nll, want.tokens[i].nll, 0.05) << i;
    e_gpu += std::abs(got.tokens[i].nll - ref.tokens[i].nll);
    e_cpu += std::abs(want.tokens[i].nll - ref.tokens[i].nll);
  }
  EXPECT_LT(e_gpu, 1.5 * e_cpu + 1e-6) << "sum |nll - f32 nll|: gpu " << e_gpu << ", cpu bf16 " << e_cpu;
  EXPECT_NEAR(got.ppl / want.ppl, 1.0, 2e-3);
  EXPECT_NEAR(got.ppl / ref.ppl, 1.0, 5e-3);  // bf16 moves this 32-wide model's PPL by ~0.3%
}

// W8A8 (compressed-tensors int8, per channel), the whole model: the kernels match the CPU's above,
// but per-token int8 activations amplify any last-bit difference upstream (the f16 attention's
// summation order) into whole quantization steps: on SmolLM2 the CPU's own W8A8 logits move by
// up to 5 between an f32 and an f16 cache (README). So the bar here is the PPL, and logits of
// the same order as the CPU's (dense output head in bf16 on both).
TEST(Cuda, TinyLlamaW8A8MatchesCpu) {
  QT_REQUIRE_GPU();
  const std::string dir = convert_tiny("cuda-w8a8", "--scheme int8 --group-size 0");
  ASSERT_FALSE(dir.empty());
  const auto ids = random_ids(40, 13);
  Checkpoint a = load_checkpoint(dir);
  PackedLinearOptions lo;
  lo.compute = Compute::BF16;
  LlamaModel cpu(a, checkpoint_linear_factory(a, lo));
  EXPECT_EQ(cpu.linear_kind(), "w8a8");
  const auto want = model_logits(cpu, ids, "f16");
  const auto f32 = cpu_logits(load_checkpoint(tiny_dir()), Compute::F32, "f32", ids);
  cuda::GpuModel gpu(load_checkpoint(dir));
  EXPECT_EQ(gpu.kind(), "w8a8");
  const auto got = cuda::forward_logits(gpu, ids);
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
  EXPECT_LT(worst, 0.5);
  EXPECT_LT(rms_diff(got, want), 3 * rms_diff(want, f32) + 1e-3);
  {  // the fused epilogues (RoPE, residual + norm) compute what the separate kernels do, bit for bit
    setenv("QT_CUDA_Q8_FUSE", "0", 1);
    cuda::GpuModel sep(load_checkpoint(dir));
    unsetenv("QT_CUDA_Q8_FUSE");
    const auto g2 = cuda::forward_logits(sep, ids);
    ASSERT_EQ(g2.size(), got.size());
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != g2[i];
    EXPECT_EQ(differ, 0u) << "fused vs separate W8A8 epilogues";
  }
  PplOptions po;
  po.ctx = 32;
  po.bos_id = 1;
  const auto text = random_ids(5 * 32, 14);
  PplOptions pc = po;
  pc.kv = kv::uniform_kv_config(a.config.n_layers, kv::parse_kv_spec("f16", "kv"), kv::parse_kv_spec("f16", "kv"));
  const PplResult pw = evaluate_perplexity(cpu, text, pc), pg = cuda::evaluate_perplexity(gpu, text, po, 2);
  // The CPU's W8A8 PPL moves by 0.45% on this model between an f16 and an f32 cache alone (the
  // GPU's differs from the CPU's f16-cache run by 0.68% on the H100): the GPU may differ from the
  // CPU by at most twice what that cache change does.
  const PplResult p32 = evaluate_perplexity(cpu, text, po);
  const double own = std::abs(pw.ppl / p32.ppl - 1.0);
  EXPECT_GT(own, 0.0);
  EXPECT_LT(std::abs(pg.ppl / pw.ppl - 1.0), 2 * own + 1e-3) << "gpu " << pg.ppl << " cpu " << pw.ppl << " cpu f32 cache " << p32.ppl;
}

// W4A8 (int4 per channel, zero point 8): the codes unpacked to int8 at load and run by the W8A8
// kernels, against the CPU's W4A8 forward (per-token int8 activations, int32 sums), held as W8A8 is.
TEST(Cuda, TinyLlamaW4A8MatchesCpu) {
  QT_REQUIRE_GPU();
  const std::string dir = convert_tiny("cuda-w4a8", "--scheme int4 --group-size 0");
  ASSERT_FALSE(dir.empty());
  const auto ids = random_ids(40, 17);
  Checkpoint a = load_checkpoint(dir);
  PackedLinearOptions lo;
  lo.compute = Compute::BF16;
  LlamaModel cpu(a, checkpoint_linear_factory(a, lo));
  const auto want = model_logits(cpu, ids, "f16");
  const auto f32 = cpu_logits(load_checkpoint(tiny_dir()), Compute::F32, "f32", ids);
  cuda::GpuModel gpu(load_checkpoint(dir));
  EXPECT_EQ(gpu.kind(), "w4a8");
  const auto got = cuda::forward_logits(gpu, ids);
  ASSERT_EQ(got.size(), want.size());
  // int4 moves the logits far more than the GPU/CPU differences of the int8 path (W8A8 above): a
  // wrong unpack lands near the int4 error itself, not below half of it.
  EXPECT_GT(rms_diff(want, f32), 0.0);
  EXPECT_LT(rms_diff(got, want), 0.5 * rms_diff(want, f32)) << "cpu " << cpu.linear_kind();
  // The PPL held as W8A8's: within twice what an f16 instead of an f32 cache moves the CPU's own
  // (the folder's tied embedding is int4 too: the CPU's head runs on int8 activations, and so must the GPU's).
  PplOptions po;
  po.ctx = 32;
  po.bos_id = 1;
  const auto text = random_ids(5 * 32, 18);
  PplOptions pc = po;
  pc.kv = kv::uniform_kv_config(a.config.n_layers, kv::parse_kv_spec("f16", "kv"), kv::parse_kv_spec("f16", "kv"));
  const PplResult pw = evaluate_perplexity(cpu, text, pc), pg = cuda::evaluate_perplexity(gpu, text, po, 2);
  const PplResult p32 = evaluate_perplexity(cpu, text, po);
  const double own = std::abs(pw.ppl / p32.ppl - 1.0);
  std::printf("tiny w4a8: gpu/cpu PPL %.5f, cpu f16/f32 cache %.5f\n", pg.ppl / pw.ppl, pw.ppl / p32.ppl);
  EXPECT_LT(std::abs(pg.ppl / pw.ppl - 1.0), 2 * own + 1e-3) << "gpu " << pg.ppl << " cpu " << pw.ppl << " cpu f32 cache " << p32.ppl;
}

// MLX affine 4-bit (every Linear, the embedding and the head quantized): decoded to bf16 for the
// GEMMs, so the GPU's error against the CPU's affine forward (integer kernels, ~fp32) is held to the
// bf16 error of the dense model (the CPU's bf16 path against its f32 path).
TEST(Cuda, TinyLlamaAffine4MatchesCpu) {
  QT_REQUIRE_GPU();
  const std::string dir = convert_tiny("cuda-affine", "--scheme affine --bits 4 --group-size 32");
  ASSERT_FALSE(dir.empty());
  const auto ids = random_ids(40, 15);
  Checkpoint a = load_checkpoint(dir);
  LlamaModel cpu(a, checkpoint_linear_factory(a, {}));
  const auto want = model_logits(cpu, ids, "f16");
  Checkpoint d = load_checkpoint(tiny_dir());
  const double bf16_err = rms_diff(cpu_logits(d, Compute::BF16, "f16", ids), cpu_logits(d, Compute::F32, "f32", ids));
  cuda::GpuModel gpu(load_checkpoint(dir));
  EXPECT_EQ(gpu.kind(), "affine4-g32");
  const auto got = cuda::forward_logits(gpu, ids);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_GT(bf16_err, 0.0);
  EXPECT_LT(rms_diff(got, want), 1.5 * bf16_err) << "affine gpu vs cpu, against the dense model's bf16 error";
}

// bitsandbytes NF4 and FP4 (blocks of 64 over the flattened weights): decoded to bf16 per GEMM
// on the GPU, against the CPU's forward of the same folder (fp32 decode), held to the dense
// model's bf16 error as affine is.
TEST(Cuda, TinyLlamaNf4Fp4MatchCpu) {
  QT_REQUIRE_GPU();
  for (const std::string scheme : {"nf4", "fp4"}) {
    const std::string dir = convert_tiny("cuda-" + scheme, "--scheme " + scheme + " --group-size 64");
    ASSERT_FALSE(dir.empty());
    const auto ids = random_ids(40, 16);
    Checkpoint a = load_checkpoint(dir);
    LlamaModel cpu(a, checkpoint_linear_factory(a, {}));
    const auto want = model_logits(cpu, ids, "f16");
    Checkpoint d = load_checkpoint(tiny_dir());
    const auto dense = cpu_logits(d, Compute::F32, "f32", ids);
    const double bf16_err = rms_diff(cpu_logits(d, Compute::BF16, "f16", ids), dense);
    cuda::GpuModel gpu(load_checkpoint(dir));
    EXPECT_EQ(gpu.kind(), scheme + "-b64");
    const auto got = cuda::forward_logits(gpu, ids);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_GT(rms_diff(want, dense), 2 * bf16_err) << scheme << ": the quantization must move the logits more";
    EXPECT_LT(rms_diff(got, want), 1.5 * bf16_err) << scheme << " gpu vs cpu, against the dense model's bf16 error";
  }
}

// KLD on the GPU, end to end: the tiny model's W8A8 folder against the bf16 model, both on the GPU,
// against the CPU's evaluate_perplexity with the same pair (W8A8 and a bf16 baseline, f16 caches);
// and a model against itself gives KLD 0 and the same top token everywhere.
TEST(Cuda, TinyLlamaKldMatchesCpu) {
  QT_REQUIRE_GPU();
  const std::string dir = convert_tiny("cuda-kld", "--scheme int8 --group-size 0");
  ASSERT_FALSE(dir.empty());
  const auto text = random_ids(6 * 32, 16);
  PplOptions po;
  po.ctx = 32;
  po.bos_id = 1;
  Checkpoint a = load_checkpoint(dir), d = load_checkpoint(tiny_dir());
  PackedLinearOptions lo;
  lo.compute = Compute::BF16;
  LlamaModel cq(a, checkpoint_linear_factory(a, lo)), cb(d, Compute::BF16);
  PplOptions pc = po;
  pc.kv = kv::uniform_kv_config(a.config.n_layers, kv::parse_kv_spec("f16", "kv"), kv::parse_kv_spec("f16", "kv"));
  pc.base_kv = "f16";
  const PplResult want = evaluate_perplexity(cq, text, pc, &cb);
  cuda::GpuModel gq(load_checkpoint(dir)), gb(load_checkpoint(tiny_dir()));
  const PplResult got = cuda::evaluate_perplexity(gq, text, po, 4, {}, &gb);
  ASSERT_TRUE(got.kld && want.kld);
  EXPECT_EQ(got.kld->count, want.kld->count);
  EXPECT_GT(want.kld->kld, 1e-4);
  EXPECT_NEAR(got.kld->kld / want.kld->kld, 1.0, 0.3) << "gpu " << got.kld->kld << " cpu " << want.kld->kld;
  EXPECT_NEAR(got.kld->ppl_base / want.kld->ppl_base, 1.0, 5e-3);
  EXPECT_NEAR(got.kld->ppl / want.kld->ppl, 1.0, 1e-2);
  cuda::GpuModel gb2(load_checkpoint(tiny_dir()));
  const PplResult self = cuda::evaluate_perplexity(gb, text, po, 4, {}, &gb2);
  ASSERT_TRUE(self.kld);
  EXPECT_LT(std::abs(self.kld->kld), 1e-9);
  EXPECT_EQ(self.kld->same_top, 1.0);
}

// ------------------------------------------------------------------- KV methods on the GPU (kv.h)

kv::KVConfig kv_config(const std::string& k, const std::string& v, kv::KVMode mode, int n_layers = 1) {
  kv::KVConfig c = kv::uniform_kv_config(n_layers, kv::parse_kv_spec(k, "--kv-k"), kv::parse_kv_spec(v, "--kv-v"));
  c.mode = mode;
  return c;
}
// K/V-like rows: N(0, 1) with a few large channels (as real keys have), rounded to f16 as the
// cache rounds them on the way in.
std::vector<float> kv_rows(int n, int D, uint32_t seed) {
  auto x = randn(size_t(n) * D, seed);
  for (int t = 0; t < n; ++t)
    for (int d = 0; d < D; d += 13) x[size_t(t) * D + d] *= 6.0f;
  for (float& v : x) v = f16v(v);
  return x;
}

// The CPU codec's bytes for the positions the cache encodes after n tokens: the reference.
std::vector<uint8_t> cpu_codes(const kv::KVSpec& spec, bool key, const kv::KVConfig& cfg, const std::vector<float>& x,
                               int n, int D, int64_t enc) {
  kv::KVContext ctx;
  ctx.head_dim = D;
  ctx.seed = cfg.seed;
  auto codec = kv::make_codec(spec, key ? kv::Side::Key : kv::Side::Value, ctx);
  const int G = codec->token_group();
  const size_t gb = codec->group_bytes();
  std::vector<uint8_t> out(size_t(enc / G) * gb, 0);
  for (int64_t g = 0; g < enc / G; ++g) codec->encode(&x[size_t(g) * G * D], D, &out[size_t(g) * gb]);
  (void)n;
  return out;
}

struct KvCase {
  std::string spec;
  bool key;
  int64_t enc;  // positions encoded after n = 160 tokens (the cache's boundary)
};

// Encode on the GPU gives the CPU codec's bytes, every one, for every method and width cuda runs
// (kivi keys: groups of 32 tokens per channel, r = 128: 128 of 160 positions; kivi values: per
// token, the newest 128 kept exact: 32 encoded).
TEST(Cuda, KvEncodeMatchesCpuCodes) {
  QT_REQUIRE_GPU();
  const int n = 160;
  const std::vector<KvCase> cases = {
      {"affine:bits=4", true, n},          {"affine:bits=2,group=64", false, n}, {"affine:bits=3", true, n},
      {"affine:bits=8,group=64", false, n}, {"kivi:bits=2", true, 128},        {"kivi:bits=4,r=0", true, n},
      {"kivi:bits=3,group=64,r=64", true, 128}, {"kivi:bits=2", false, 32},     {"kivi:bits=4,r=0", false, n},
      {"turboquant_mse:bits=1", true, n},  {"turboquant_mse:bits=2", false, n}, {"turboquant_mse:bits=2.5", true, n},
      {"turboquant_mse:bits=3", true, n},  {"turboquant_mse:bits=3.5", false, n}, {"turboquant_mse:bits=4", true, n},
      {"turboquant_mse:bits=2,n_outlier=8,outlier_bits=4", true, n}, {"turboquant_mse:bits=3,r=32", false, n - 32},
  };
  for (int D : {64, 128}) {
    const auto x = kv_rows(n, D, 21 + D);
    for (const KvCase& c : cases) {
      const kv::KVConfig cfg = kv_config("f16", "f16", kv::KVMode::Cache);
      const kv::KVSpec spec = kv::parse_kv_spec(c.spec, "kv");
      const auto want = cpu_codes(spec, c.key, cfg, x, n, D, c.enc);
      const auto got = cuda::testing::kv_encode(spec, c.key, cfg, x, n, D);
      ASSERT_EQ(got.size(), want.size()) << c.spec << " D=" << D;
      size_t diff = 0;
      for (size_t i = 0; i < got.size(); ++i) diff += got[i] != want[i];
      size_t first = 0;
      while (first < got.size() && got[first] == want[first]) ++first;
      if (diff) {
        std::printf("%s D=%d: %zu bytes differ, first %zu of %zu: gpu/cpu", c.spec.c_str(), D, diff, first, got.size());
        for (size_t i = first; i < std::min(got.size(), first + 8); ++i) std::printf(" %02x/%02x", got[i], want[i]);
        std::printf("  x0..3 %g %g %g %g\n", x[0], x[1], x[2], x[3]);
      }
      EXPECT_EQ(diff, 0u) << c.spec << (c.key ? " keys" : " values") << " D=" << D << ": " << diff << " of "
                          << got.size() << " bytes differ";
    }
  }
}

// Decode into the domain: the CPU codec's decode (fp32) as f16, and after the boundary the exact
// vectors (turboquant: rotated, Π x).
TEST(Cuda, KvDecodeMatchesCpu) {
  QT_REQUIRE_GPU();
  const int n = 160, D = 64;
  const auto x = kv_rows(n, D, 5);
  for (const KvCase& c : std::vector<KvCase>{{"affine:bits=4", true, n}, {"kivi:bits=2", true, 128},
                                             {"kivi:bits=2", false, 32}, {"turboquant_mse:bits=3,r=32", true, n - 32},
                                             {"turboquant_mse:bits=2.5", false, n}}) {
    const kv::KVConfig cfg = kv_config("f16", "f16", kv::KVMode::Cache);
    const kv::KVSpec spec = kv::parse_kv_spec(c.spec, "kv");
    kv::KVContext ctx;
    ctx.head_dim = D;
    auto codec = kv::make_codec(spec, c.key ? kv::Side::Key : kv::Side::Value, ctx);
    const auto codes = cpu_codes(spec, c.key, cfg, x, n, D, c.enc);
    std::vector<float> want(size_t(n) * D);
    if (c.enc > 0) codec->decode(codes.data(), 0, int(c.enc), want.data());
    const bool rot = spec.method == "turboquant_mse";
    const kv::Rotation R = ctx.rotation("wht");
    for (int64_t j = c.enc; j < n; ++j) {
      if (rot) R.apply(&x[size_t(j) * D], &want[size_t(j) * D]);
      else std::copy(&x[size_t(j) * D], &x[size_t(j + 1) * D], &want[size_t(j) * D]);
    }
    const auto got = cuda::testing::kv_decode(spec, c.key, cfg, x, n, D);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, double(std::abs(got[i] - f16v(want[i]))) / std::max(1e-3, double(std::abs(want[i]))));
    EXPECT_LT(worst, 1.5e-3) << c.spec << ": relative to the CPU's decode rounded to f16 (one f16 ulp)";
  }
}

// Attention through the quantized cache: the GPU against the CPU's QuantCache (make_kv_cache) on
// the same K/V, chunk by chunk, in cache and decode mode, for each method, with residual windows
// and mixed key/value methods; the quantized result is far from the f16 cache's, so the tolerance
// (f16 domain vectors and probabilities on the GPU) is a real bar.
TEST(Cuda, KvAttentionMatchesCpuQuantCache) {
  QT_REQUIRE_GPU();
  const int B = 2, T = 192, nh = 6, nkv = 2, D = 64, Q = nh * D, KV = nkv * D;
  const float scale = 0.125f;
  auto q = randn(size_t(B) * T * Q, 31, 1.5f), k = kv_rows(B * T * nkv, D, 32), v = kv_rows(B * T * nkv, D, 33);
  for (float& x : q) x = f16v(x);
  KVShape s;
  s.n_layers = 1, s.n_heads = nh, s.n_kv_heads = nkv, s.head_dim = D, s.max_ctx = T, s.scale = scale;
  auto cpu_attention = [&](const kv::KVConfig& cfg) {
    auto cache = make_kv_cache(cfg, s);
    std::vector<float> out(size_t(B) * T * Q);
    for (int b = 0; b < B; ++b) {
      cache->clear();
      cache->append(0, &k[size_t(b) * T * KV], &v[size_t(b) * T * KV], T, 0);
      cache->attend(0, &q[size_t(b) * T * Q], T, 0, &out[size_t(b) * T * Q]);
    }
    return out;
  };
  const auto exact = cpu_attention(kv_config("f16", "f16", kv::KVMode::Cache));
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"affine:bits=4", "affine:bits=4"},
      {"affine:bits=2,r=48", "affine:bits=3,group=64,r=16"},
      {"kivi:bits=2", "kivi:bits=2"},
      {"kivi:bits=4,r=0", "kivi:bits=4,r=0"},
      {"turboquant_mse:bits=3", "turboquant_mse:bits=3"},
      {"turboquant_mse:bits=2.5,r=40", "turboquant_mse:bits=2,r=24"},
      {"kivi:bits=2", "f16"},
      {"f16", "turboquant_mse:bits=2"},
      {"kivi:bits=2,r=64", "kivi:bits=2,r=64"},
  };
  // Decode windows run banded where 2W < T (attention.h: r = 48, 16; 40 with a partial last
  // block; kivi r = 0's token groups; r = 64) and over T × T otherwise (r = 128) — and each once
  // more with the band off (QT_CUDA_KV_BAND=0), so both paths meet the CPU.
  for (int pass = 0; pass < 3; ++pass)
    for (auto& [km, vm] : methods) {
      const kv::KVMode mode = pass == 0 ? kv::KVMode::Cache : kv::KVMode::Decode;
      const kv::KVConfig cfg = kv_config(km, vm, mode);
      const auto want = cpu_attention(cfg);
      if (pass == 2) setenv("QT_CUDA_KV_BAND", "0", 1);
      const auto got = cuda::testing::kv_attention(cfg, q, k, v, B, T, nh, nkv, D, scale);
      unsetenv("QT_CUDA_KV_BAND");
      ASSERT_EQ(got.size(), want.size());
      double worst = 0, moved = 0, mag = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, double(std::abs(got[i] - want[i])));
        moved = std::max(moved, double(std::abs(want[i] - exact[i])));
        mag = std::max(mag, double(std::abs(want[i])));
      }
      const std::string what = km + " / " + vm + (pass == 0 ? " cache" : pass == 1 ? " decode" : " decode, no band");
      std::printf("kv attention %-58s worst %.2e of |out| <= %.1f, the method moves it %.3f\n", what.c_str(), worst, mag, moved);
      // f16 domain vectors and f16 probabilities: about 1e-3 of the largest output, as the f16
      // cache's own test (AttentionMatchesCpuF16Cache: 3e-3 for outputs up to ~4)
      EXPECT_LT(worst, 3e-3 + 2e-3 * mag) << what << " (the method moves the output by " << moved << ")";
      EXPECT_GT(moved, 10 * worst) << what;
    }
}

// The whole forward with a quantized cache: eval-ppl on the tiny llama (head_dim 8: turboquant_mse,
// the method whose WHT fits it) against the CPU's bf16 path with the same KV config, cache and
// decode mode. bf16 moves K, and a 2–3-bit code turns that into whole steps at its boundaries, so
// the GPU is held to what bf16 does to the CPU's own PPL with the same cache (its bf16 path
// against its f32 path): within 2e-3 + 1.5x that.
TEST(Cuda, TinyLlamaQuantizedKvMatchesCpu) {
  QT_REQUIRE_GPU();
  const auto ids = random_ids(5 * 32, 13);
  Checkpoint a = load_checkpoint(tiny_dir());
  LlamaModel cbf(a, Compute::BF16), c32(a, Compute::F32);
  cuda::GpuModel gpu(load_checkpoint(tiny_dir()));
  for (auto mode : {kv::KVMode::Cache, kv::KVMode::Decode})
    for (const std::string m : {"turboquant_mse:bits=2", "turboquant_mse:bits=3,r=8"}) {
      PplOptions po;
      po.ctx = 32;
      po.bos_id = 1;
      po.kv = kv_config(m, m, mode, a.config.n_layers);
      const PplResult want = evaluate_perplexity(cbf, ids, po);
      PplOptions pf = po;
      pf.kv = kv_config("f16", "f16", mode, a.config.n_layers);
      const PplResult f16 = evaluate_perplexity(cbf, ids, pf);
      const PplResult got = cuda::evaluate_perplexity(gpu, ids, po, 2);
      EXPECT_EQ(got.kv_name, want.kv_name);
      EXPECT_EQ(got.kv_bytes_per_token, want.kv_bytes_per_token);
      const double e_cpu = std::abs(want.ppl / evaluate_perplexity(c32, ids, po).ppl - 1.0);
      std::printf("tiny %s %s: gpu/cpu-bf16 PPL %.5f, cpu bf16/f32 %.5f\n", m.c_str(),
                  mode == kv::KVMode::Decode ? "decode" : "cache", got.ppl / want.ppl, 1.0 + e_cpu);
      EXPECT_LT(std::abs(got.ppl / want.ppl - 1.0), 2e-3 + 1.5 * e_cpu) << m;
      EXPECT_GT(std::abs(want.ppl / f16.ppl - 1.0), 4e-3) << m << ": the method must move the PPL more than the bar";
    }
}

// --------------------------------------------------------------------------- the CLI, any build

TEST(CudaCli, UnsupportedIsOneLineExit2) {
  const std::string bin = test::quanttool_bin(), text = test::source_dir() + "/data/wikitext-2/wiki.test.raw";
  for (const std::string extra : {"", " --kv qjl", " --kv-k turboquant_prod", " --compute f32", " --kl-base-kv kivi"}) {
    std::string out;
    const int rc = test::run_cmd(bin + " eval-ppl --device cuda --model " + tiny_dir() + " --text " + text + extra, &out);
    EXPECT_EQ(rc, 2) << extra << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << extra << ": " << out;
    if (!cuda::built()) {
      EXPECT_NE(out.find("built without CUDA"), std::string::npos) << out;
    } else if (!extra.empty()) {
      EXPECT_NE(out.find("not on cuda yet"), std::string::npos) << extra << ": " << out;
    }
  }
}

}  // namespace
}  // namespace qt
