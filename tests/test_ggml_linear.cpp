// GGUF weights computed from their ggml blocks (LoadMode::Native, libquant/linear/ggml_linear.cpp):
//  - the AVX-512 block decoders give the type rows' to_float values (gguf-py's arithmetic, checked
//    against gguf-py by the GGUF goldens) bit for bit, and their fused dot products equal a double
//    dot product of those values to fp32 accuracy;
//  - a batch through the ggml Linear has the bits of a dense Linear over the dequantized matrix
//    (what an Eager load computes), the Q/K row permutation included; one token agrees to fp32
//    accuracy and the decode team's slices have forward()'s bits;
//  - whole models: llama.cpp's quantized tiny MoE files give, Native, the Eager load's logits bit
//    for bit in a batch, and within fp32 accuracy one token at a time, from the file's bytes.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "formats/checkpoint.h"
#include "formats/ggml_blocks.h"
#include "libquant/cpu_features.h"
#include "libquant/kernels/ggml_decode.h"
#include "libquant/kernels/ggml_token_i8.h"
#include "libquant/kernels/ggml_interleaved.h"
#include "libquant/linear/ggml_linear.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/model/llama.h"
#include "tests/support.h"

namespace qt {
namespace {

const char* const kTypes[] = {"Q4_0",   "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL",
                              "IQ4_XS", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};

// `rows` rows of `cols` random values quantized with the type's reference quantizer.
std::vector<uint8_t> random_blocks(const GgmlTypeRow& t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * cols));
  for (float& v : x) v = n(rng) * (1.0f + float(rng() % 4));
  const size_t nb = size_t(rows * cols / t.block_size);
  std::vector<uint8_t> b(nb * size_t(t.type_size));
  t.from_float(x.data(), b.data(), nb);
  return b;
}

TEST(GgmlDecode, SimdEqualsTheTypeRowBitForBit) {
  int tested = 0;
  for (const char* name : kTypes) {
    const GgmlTypeRow& t = *ggml_type_row_by_name(name);
    const kernels::GgmlDecodeFn simd = kernels::ggml_decoder_avx512(uint32_t(t.type));
    if (!simd) continue;
    ++tested;
    const int64_t cols = 4 * 256;
    const std::vector<uint8_t> b = random_blocks(t, 3, cols, 11);
    const size_t nb = size_t(3 * cols / t.block_size);
    std::vector<float> want(size_t(3 * cols)), got(size_t(3 * cols), 42.0f);
    t.to_float(b.data(), want.data(), nb);
    simd(b.data(), got.data(), nb);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << name << " element " << i;
    // The fused dot product: the same values, summed in fp32.
    std::vector<float> x(static_cast<size_t>(cols));
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : x) v = u(rng);
    const kernels::GgmlDotFn dot = kernels::ggml_dot_avx512(uint32_t(t.type));
    ASSERT_NE(dot, nullptr) << name;
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < cols; ++i)
      ref += double(want[size_t(i)]) * x[size_t(i)], mag += std::fabs(want[size_t(i)] * x[size_t(i)]);
    std::vector<float> xd(x);  // the token in the order the dot reads it
    if (const auto order = kernels::ggml_dot_token_order(uint32_t(t.type)))
      order(x.data(), size_t(cols / t.block_size), xd.data());
    const float d = dot(b.data(), xd.data(), size_t(cols / t.block_size));
    EXPECT_NEAR(d, ref, 1e-6 * mag) << name;
  }
  if (!tested) GTEST_SKIP() << "no AVX-512";
  EXPECT_EQ(tested, 12);
}

// Σ w·(dx·q) over a row of decoded weights w and the token x as rounded to int8 (double), after
// checking the rounding is llama.cpp's Q8_0 rule (d = max|x|/127, q = nearest(x·127/max|x|)); mag: Σ|w·x|.
void int8_reference(const std::vector<float>& w, const std::vector<float>& x, const kernels::GgmlTokenI8& q,
                    double* ref, double* mag) {
  *ref = *mag = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    float amax = 0;
    for (size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    ASSERT_EQ(q.q[i], int(std::nearbyint(x[i] * (127.0f / amax)))) << i;
    const double xi = double(q.d[i / 32]) * q.q[i];
    *ref += double(w[i]) * xi;
    *mag += std::fabs(double(w[i]) * xi);
  }
}

// The int8-token kernels over 16 interleaved rows: exactly Σ w·(dx·q) of the decoded weights and
// the token as rounded, to fp32 accuracy (one row left out of the group: its lane is 0), and every
// row unpacks to its blocks.
TEST(GgmlDotI8, EqualsTheDecodedWeightsTimesTheRoundedToken) {
  int tested = 0;
  for (const char* name :
       {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "MXFP4", "IQ4_XS", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}) {
    const GgmlTypeRow& t = *ggml_type_row_by_name(name);
    const kernels::GgmlInterleaved* il = kernels::ggml_interleaved(uint32_t(t.type));
    if (!il) continue;
    ++tested;
    for (int64_t cols : {int64_t(256), int64_t(256 * 5), int64_t(32 * 17)}) {
      if (cols % t.block_size) continue;
      const size_t nb = size_t(cols / t.block_size), rb = nb * size_t(t.type_size);
      const std::vector<uint8_t> b = random_blocks(t, 16, cols, 21);
      std::vector<float> x(static_cast<size_t>(cols));
      std::mt19937 rng(2);
      std::normal_distribution<float> n(0.0f, 1.0f);
      for (float& v : x) v = n(rng);
      kernels::GgmlTokenI8 q;
      kernels::ggml_quantize_token(x.data(), cols, &q);
      // two groups walked side by side: the rows, then the rows in reverse order
      const size_t gb = nb * il->group_block_bytes;
      std::vector<uint8_t> group(2 * gb);
      const uint8_t* rows[16];
      const uint8_t* reversed[16];
      for (int i = 0; i < 16; ++i) rows[i] = i == 5 ? nullptr : b.data() + size_t(i) * rb;
      for (int i = 0; i < 16; ++i) reversed[i] = rows[15 - i];
      il->pack(rows, nb, group.data());
      il->pack(reversed, nb, group.data() + gb);
      alignas(64) float y[16], y2[32];
      il->gemv(group.data(), gb, 1, q, nb, y);
      il->gemv(group.data(), gb, 2, q, nb, y2);
      for (int i = 0; i < 16; ++i) {
        std::vector<float> w(static_cast<size_t>(cols));
        t.to_float(b.data() + size_t(i) * rb, w.data(), nb);
        double ref = 0, mag = 0;
        int8_reference(w, x, q, &ref, &mag);
        if (i == 5) {
          EXPECT_EQ(y[i], 0.0f) << name;
          EXPECT_EQ(y2[26], 0.0f) << name;
          continue;
        }
        EXPECT_NEAR(y[i], ref, 1e-5 * mag) << name << " cols " << cols << " row " << i;
        EXPECT_EQ(y2[i], y[i]) << name << " row " << i;
        EXPECT_EQ(y2[31 - i], y[i]) << name << " row " << i << " reversed";
        std::vector<uint8_t> back(rb);
        il->unpack(group.data(), i, nb, back.data());
        EXPECT_TRUE(std::equal(back.begin(), back.end(), b.begin() + ptrdiff_t(size_t(i) * rb))) << name << " " << i;
      }
    }
  }
  if (!tested) GTEST_SKIP() << "no AVX-512 VNNI";
  EXPECT_EQ(tested, 13);
}

// A weight of `type` with a Q/K-style row permutation, as LoadMode::Native hands it over.
struct Weight {
  std::vector<uint8_t> bytes;
  GgmlWeight w;
  std::vector<float> dense;  // the HF-order rows, dequantized
};

Weight make_weight(const char* type, int64_t rows, int64_t cols, bool permuted) {
  const GgmlTypeRow& t = *ggml_type_row_by_name(type);
  Weight r;
  r.bytes = random_blocks(t, rows, cols, 3);
  r.w.type = uint32_t(t.type);
  r.w.data = r.bytes.data();
  r.w.nbytes = r.bytes.size();
  r.w.row_bytes = r.bytes.size() / size_t(rows);
  r.w.rows = rows;
  r.w.cols = cols;
  std::vector<float> all(size_t(rows * cols));
  t.to_float(r.bytes.data(), all.data(), all.size() / size_t(t.block_size));
  r.dense = all;
  if (permuted) {
    for (int64_t i = 0; i < rows; ++i) r.w.row_of.push_back(int32_t((i * 7) % rows));  // rows coprime with 7
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(all.begin() + r.w.row_of[size_t(i)] * cols, cols, r.dense.begin() + i * cols);
  }
  return r;
}

TEST(GgmlLinear, BatchHasTheDenseBitsOneTokenAgrees) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const char* type : {"Q4_1", "Q6_K", "Q2_K"}) {  // Q2_K: the scalar decoder
    for (Compute compute : {Compute::F32, Compute::BF16}) {
      const int64_t rows = 50, cols = 512;
      Weight W = make_weight(type, rows, cols, true);
      std::vector<float> bias(static_cast<size_t>(rows));
      for (float& v : bias) v = u(rng);
      const auto g = make_ggml_linear(W.w, bias.data(), compute);
      const auto d = make_dense_linear(W.dense.data(), rows, cols, bias.data(), compute);
      const auto d32 = make_dense_linear(W.dense.data(), rows, cols, bias.data(), Compute::F32);
      EXPECT_EQ(g->weight_bytes(), W.bytes.size());
      for (int64_t m : {1, 3, 9, 40}) {
        std::vector<float> x(size_t(m * cols)), yg(size_t(m * rows)), yd(size_t(m * rows));
        for (float& v : x) v = u(rng);
        g->forward(x.data(), m, yg.data());
        (m >= 4 ? d : d32)->forward(x.data(), m, yd.data());
        for (size_t i = 0; i < yg.size(); ++i) {
          if (m >= 4)  // panels: the dense tiles over the same values
            ASSERT_EQ(std::bit_cast<uint32_t>(yg[i]), std::bit_cast<uint32_t>(yd[i])) << type << " m " << m << " " << i;
          else  // dot products in fp32 whatever the compute (decode's GEMV)
            ASSERT_NEAR(yg[i], yd[i], 2e-4 + 1e-5 * std::fabs(yd[i])) << type << " m " << m << " " << i;
        }
        if (m != 1) continue;
        std::vector<float> ys(size_t(rows), -1.0f);
        for (int part = 0; part < 3; ++part) {  // whole 16-row blocks: the decode step's SwiGLU needs them
          const RowSlice rs = g->gemv_slice(x.data(), part, 3, ys.data());
          EXPECT_TRUE(rs.r0 % 16 == 0 && (rs.r1 % 16 == 0 || rs.r1 == rows)) << type << " " << rs.r0 << ".." << rs.r1;
        }
        for (size_t i = 0; i < ys.size(); ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(ys[i]), std::bit_cast<uint32_t>(yg[i])) << type << " slice row " << i;
      }
      std::vector<float> row(static_cast<size_t>(cols));
      g->dequantize_row(7, row.data());
      for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(row[size_t(j)], W.dense[size_t(7 * cols + j)]);
    }
  }
}

// --weight-act int8 over the legacy types (16 interleaved rows, the file's rows let go of): batches
// still give the dense bits (rows unpacked from their groups), one token is the int8 reference,
// its slices are whole groups and every row is computed once.
TEST(GgmlLinear, Int8TokensOverInterleavedRows) {
  if (!kernels::ggml_i8_supported()) GTEST_SKIP() << "no AVX-512 VNNI";
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const char* type :
       {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "MXFP4", "IQ4_XS", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}) {
    // 50 rows: the last group padded; 50 × 1536 weights: past the threads' threshold
    const int64_t rows = 50, cols = 1536;
    Weight W = make_weight(type, rows, cols, true);
    std::vector<float> bias(static_cast<size_t>(rows));
    for (float& v : bias) v = u(rng);
    const auto g = make_ggml_linear(W.w, bias.data(), Compute::F32, true);
    std::string kind = std::string("gguf-") + type + "-a8";
    std::transform(kind.begin(), kind.end(), kind.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    EXPECT_EQ(g->kind(), kind);
    const GgmlTypeRow& t = *ggml_type_row_by_name(type);
    EXPECT_EQ(g->weight_bytes(),
              4 * size_t(cols / t.block_size) * kernels::ggml_interleaved(uint32_t(t.type))->group_block_bytes);
    EXPECT_FALSE(g->borrows_weights());
    const auto d = make_dense_linear(W.dense.data(), rows, cols, bias.data(), Compute::F32);
    for (int64_t m : {1, 2, 8}) {
      std::vector<float> x(size_t(m * cols)), yg(size_t(m * rows)), yd(size_t(m * rows));
      for (float& v : x) v = u(rng);
      g->forward(x.data(), m, yg.data());
      d->forward(x.data(), m, yd.data());
      for (int64_t t = 0; t < m; ++t) {
        const std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
        kernels::GgmlTokenI8 q;
        kernels::ggml_quantize_token(xt.data(), cols, &q);
        for (int64_t r = 0; r < rows; ++r) {
          const size_t i = size_t(t * rows + r);
          if (m >= 4) {
            ASSERT_EQ(std::bit_cast<uint32_t>(yg[i]), std::bit_cast<uint32_t>(yd[i])) << type << " " << i;
            continue;
          }
          const std::vector<float> w(W.dense.begin() + r * cols, W.dense.begin() + (r + 1) * cols);
          double ref = 0, mag = 0;
          int8_reference(w, xt, q, &ref, &mag);
          ASSERT_NEAR(yg[i], ref + bias[size_t(r)], 1e-5 * mag + 1e-6) << type << " m " << m << " row " << r;
        }
      }
      if (m != 1) continue;
      for (int parts : {3, 6}) {  // 6 parts of 4 groups: some slices empty
        int64_t next = 0;
        for (int part = 0; part < parts; ++part) {
          std::vector<float> ys(size_t(rows), -1.0f);
          const RowSlice s = g->gemv_slice(x.data(), part, parts, ys.data());
          EXPECT_EQ(s.r0, next) << type;
          EXPECT_TRUE(s.r0 % 16 == 0 && (s.r1 % 16 == 0 || s.r1 == rows)) << type << " " << s.r0 << ".." << s.r1;
          next = s.r1;
          for (int64_t i = 0; i < rows; ++i)  // its own rows, with forward()'s bits, and nothing else
            ASSERT_EQ(std::bit_cast<uint32_t>(ys[size_t(i)]),
                      std::bit_cast<uint32_t>(i >= s.r0 && i < s.r1 ? yg[size_t(i)] : -1.0f))
                << type << " parts " << parts << " row " << i;
        }
        EXPECT_EQ(next, rows);
      }
    }
    std::vector<float> row(static_cast<size_t>(cols));
    g->dequantize_row(49, row.data());
    for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(row[size_t(j)], W.dense[size_t(49 * cols + j)]) << type;
  }
}

// y = x·Wᵀ with x rounded as the int8-token kernels round it, summed in double: the reference of
// the int8 path, over the Eager load's (dequantized) weights.
class Int8TokenReference final : public Linear {
 public:
  explicit Int8TokenReference(const Tensor& w) : w_(to_f32(w)), n_(w.shape[0]), k_(w.shape[1]) {}
  void forward(const float* x, int64_t m, float* y) const override {
    for (int64_t t = 0; t < m; ++t) {
      kernels::GgmlTokenI8 q;
      kernels::ggml_quantize_token(x + t * k_, k_, &q);
      for (int64_t r = 0; r < n_; ++r) {
        double s = 0;
        for (int64_t i = 0; i < k_; ++i) s += double(w_[size_t(r * k_ + i)]) * q.d[size_t(i / 32)] * q.q[size_t(i)];
        y[t * n_ + r] = float(s);
      }
    }
  }
  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  size_t weight_bytes() const override { return w_.size() * 4; }
  std::string kind() const override { return "int8-token-reference"; }

 private:
  std::vector<float> w_;
  int64_t n_, k_;
};

// Logits of the Eager and the Native load of one file: batch (bit for bit when `exact`) and one token
// at a time (the GEMVs, fp32 accuracy). int8: the Native load with int8 tokens — the batch still the
// Eager bits, one token at a time (the decode step's slices over interleaved rows) against the Eager
// weights through Int8TokenReference.
void expect_native_logits(const std::string& path, bool exact, bool int8 = false) {
  const Checkpoint eager = load_checkpoint(path);
  Checkpoint native = load_checkpoint(path, LoadMode::Native);
  ASSERT_FALSE(native.ggml_weights.empty()) << path;
  EXPECT_TRUE(eager.ggml_weights.empty());
  const std::vector<int32_t> ids = {1, 17, 30, 42, 7, 59, 51, 3, 25, 63, 11, 5};
  const int n = int(ids.size());
  const int64_t V = eager.config.vocab;
  PackedLinearOptions opt;
  if (int8) opt.weight_act = WeightAct::Int8Group;
  LlamaModel a(eager, checkpoint_linear_factory(eager, {}));
  LlamaModel b(native, checkpoint_linear_factory(native, opt));
  EXPECT_NE(b.linear_kind().find(int8 ? "-a8" : "gguf-"), std::string::npos) << b.linear_kind();
  std::vector<float> la(size_t(n * V)), lb(size_t(n * V));
  auto ca = a.make_cache(n), cb = b.make_cache(n);
  a.forward(ids.data(), n, 0, *ca, 0, n, la.data());
  b.forward(ids.data(), n, 0, *cb, 0, n, lb.data());
  if (exact) {
    for (size_t i = 0; i < la.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(la[i]), std::bit_cast<uint32_t>(lb[i])) << path << " logit " << i;
  } else {
    EXPECT_LT(test::max_abs_diff(la, lb), 1e-4) << path;
  }
  std::unique_ptr<LlamaModel> ref;
  if (int8) {
    ref = std::make_unique<LlamaModel>(eager, [](const std::string&, const Tensor& w, const Tensor*) {
      return std::unique_ptr<Linear>(new Int8TokenReference(w));
    });
  }
  auto c1 = b.make_cache(n), cr = ref ? ref->make_cache(n) : nullptr;
  std::vector<float> step(static_cast<size_t>(V)), want(static_cast<size_t>(V));
  double worst = 0;
  for (int t = 0; t < n; ++t) {
    b.forward(ids.data() + t, 1, t, *c1, 0, 1, step.data());
    if (ref)
      ref->forward(ids.data() + t, 1, t, *cr, 0, 1, want.data());
    else
      std::copy_n(la.begin() + t * V, V, want.begin());
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, double(std::fabs(step[size_t(v)] - want[size_t(v)])));
  }
  EXPECT_LT(worst, 1e-3) << path << (int8 ? " int8 tokens" : "");
}

// A dense llama (Q/K permuted in GGUF) written by our convert in two block types: every Linear sees
// the whole batch, so the logits are the Eager load's bits.
TEST(GgmlLinear, NativeDenseModelGivesTheEagerLogits) {
  const std::string dir = test::temp_dir("ggml_linear");
  for (const char* type : {"q4_k_m", "q8_0", "q4_0", "q4_1"}) {
    const std::string out = dir + "/tiny-llama3." + type + ".gguf";
    std::string log;
    ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + test::source_dir() +
                                "/tests/golden/logits/tiny-llama3 --out " + out + " --format gguf --gguf-type " + type,
                            &log),
              0)
        << log;
    expect_native_logits(out, true);
    // int8 tokens over interleaved rows (every Linear of these files has an int8 kernel; q4_k_m's
    // tiny rows are not whole super-blocks, so its file is mostly Q5_0, which has none)
    if (kernels::ggml_i8_supported() && std::string(type) != "q4_k_m") expect_native_logits(out, true, true);
  }
}

// llama.cpp's quantized tiny MoE files: experts that get fewer than 4 tokens take the dot-product
// path, so the batch agrees to fp32 accuracy rather than bit for bit.
TEST(GgmlLinear, NativeMoeModelsGiveTheEagerLogits) {
  for (const char* file : {"tiny-mixtral8.q4_k_m.gguf", "tiny-mixtral8.q8_0.gguf", "tiny-qwen3moe.q4_k_m.gguf"})
    expect_native_logits(test::source_dir() + "/tests/golden/gguf_moe/" + file, false);
}

}  // namespace
}  // namespace qt
