// The CUDA backend's kernels (libquant/cuda/) against the CPU ops, which are the reference: each
// kernel on random data against the CPU op (RMSNorm, RoPE, SwiGLU, GEMMs, attention, NLL, the W8A8
// passes, affine decode, KLD). The whole forward: test_cuda_model.cpp, test_cuda_arch.cpp; the KV
// methods and the CLI: test_cuda_kv.cpp (one executable, test_cuda; helpers in cuda_support.h).
#include "tests/cuda_support.h"

namespace qt {
namespace {

using namespace cudatest;

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
  for (int r = 0; r < rows; ++r)
    ops::swiglu(&deq[size_t(r) * 2 * F], &deq[size_t(r) * 2 * F + F], &h[size_t(r) * F], 1, F);
  std::vector<int8_t> wq(h.size());
  std::vector<float> ws(rows);
  quantize_activations_int8(h.data(), rows, F, wq.data(), ws.data());
  const auto got = cuda::testing::swiglu_q8(acc, rows, F, sx, sw);
  expect_same_q8(got.q, got.s, wq, ws);
}

// The W8A8 passes against the CPU's ops (as the tests above) at width w: SwiGLU + int8 at F = w
// (with some 1 + exp(−g) infinite), residual + RMSNorm + int8 and per-token int8 at dim = w, RoPE
// of the q|k|v int32 product at nh, nkv heads of head_dim hd (against the fp32 rope_split of the
// dequantized product, bit for bit).
void check_q8_passes(int F, int dim, int nh, int nkv, int hd, uint32_t seed) {
  std::mt19937 g(seed);
  {  // SwiGLU + int8
    const int rows = 5;
    std::vector<int32_t> acc(size_t(rows) * 2 * F);
    for (auto& v : acc) v = int32_t(g() % 4000001) - 2000000;
    for (int i = 0; i < 64; ++i) acc[g() % acc.size()] = (g() & 1) ? 2000000000 : -2000000000;  // exp(−g) = ∞
    const auto sx = randn(rows, 32, 1e-3f), sw = randn(size_t(2) * F, 33, 1e-3f);
    const auto got = cuda::testing::swiglu_q8(acc, rows, F, sx, sw);
    std::vector<float> deq(acc.size()), h(size_t(rows) * F);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < 2 * F; ++c) deq[size_t(r) * 2 * F + c] = sx[r] * (sw[c] * float(acc[size_t(r) * 2 * F + c]));
    for (int r = 0; r < rows; ++r)
      ops::swiglu(&deq[size_t(r) * 2 * F], &deq[size_t(r) * 2 * F + F], &h[size_t(r) * F], 1, F);
    std::vector<int8_t> wq(h.size());
    std::vector<float> ws(rows);
    quantize_activations_int8(h.data(), rows, F, wq.data(), ws.data());
    expect_same_q8(got.q, got.s, wq, ws);
  }
  {  // residual add + RMSNorm + int8, and per-token int8 of x
    const int rows = 7;
    std::vector<int32_t> acc(size_t(rows) * dim);
    for (auto& v : acc) v = int32_t(g() % 4000001) - 2000000;
    const auto sx = randn(rows, 34, 1e-3f), sw = randn(dim, 35, 1e-3f), w = randn(dim, 36);
    auto x0 = randn(size_t(rows) * dim, 37, 2.0f);
    x0[9] = 300.0f;
    std::vector<float> xg = x0;
    const auto got = cuda::testing::residual_rmsnorm_q8(acc, sx, sw, xg, w, rows, dim, 1e-5f);
    std::vector<float> x1 = x0, y(x0.size()), d(x0.size());
    for (size_t i = 0; i < d.size(); ++i) d[i] = sx[i / dim] * (sw[i % dim] * float(acc[i]));
    for (size_t i = 0; i < x1.size(); ++i) x1[i] += d[i];  // two loops: no contraction into an FMA
    EXPECT_EQ(xg, x1);
    ops::rmsnorm(x1.data(), dim, w.data(), y.data(), dim, rows, dim, 1e-5f);
    std::vector<int8_t> wq(y.size());
    std::vector<float> ws(rows);
    quantize_activations_int8(y.data(), rows, dim, wq.data(), ws.data());
    expect_same_q8(got.q, got.s, wq, ws);
    const auto qg = cuda::testing::quant_rows(x1, rows, dim);
    quantize_activations_int8(x1.data(), rows, dim, wq.data(), ws.data());
    expect_same_q8(qg.q, qg.s, wq, ws);
  }
  {  // RoPE of the q|k|v int32 product
    const int T = 6, n = 2 * T, W = (nh + 2 * nkv) * hd;
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
    const auto got = cuda::testing::rope_split_q8(acc, sx, sw, n, T, nh, nkv, hd, cs, sn);
    std::vector<float> qkv(acc.size());  // the dequantized product through the fp32 rope_split
    for (size_t i = 0; i < acc.size(); ++i) qkv[i] = sx[i / W] * (sw[i % W] * float(acc[i]));
    const auto ref = cuda::testing::rope_split(qkv, n, T, nh, nkv, hd, cs, sn);
    ASSERT_EQ(got.size(), ref.size());
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != ref[i];
    EXPECT_EQ(differ, 0u);
  }
}

// The vectorized forms (widths multiples of 4, every model here) at the 8B shape's widths
// (F 14336, hidden 4096, 32 q / 8 kv heads of 128).
TEST(Cuda, Q8VectorizedKernelsMatchCpu) {
  QT_REQUIRE_GPU();
  check_q8_passes(14336, 4096, 32, 8, 128, 31);
}

// The scalar forms, which run where a width is not a multiple of 4 (RoPE: half a head).
TEST(Cuda, Q8ScalarKernelsMatchCpu) {
  QT_REQUIRE_GPU();
  check_q8_passes(1030, 578, 4, 2, 68, 32);
}

// GemmLt::tune (timing cuBLASLt's candidates) keeps an algorithm whose int32 sums are exact.
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

}  // namespace
}  // namespace qt
