// The decode step's pieces (Linear::gemv_slice, llama_decode.cpp) at every kernel level this
// machine has:
//  * a Linear's slices for any number of parts are disjoint, cover its rows in order, and write
//    the bits forward() gives at one token — dense f32/bf16 (the family's streaming GEMV, itself
//    the batch tiles' bits), the integer schemes (kernels/int8_gemv_avx2.cpp, the VNNI tiles), which
//    equal reference_gemm, the scalar spec, and affine-4 through int8 tokens;
//  * the model's decode step (one OpenMP team, slices and barriers) gives the logits of the
//    per-Linear path bit for bit, on 2 and 3 threads, f32, W8A8 with an int8 head and MLX affine-4
//    through int8 tokens, with the dense f16 cache (attention shared by the team) and a quantized
//    one (one thread attends).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "formats/checkpoint.h"
#include "libquant/cpu_features.h"
#include "libquant/model/llama.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

namespace {

using namespace qt;

using qt::test::randn;
using qt::test::scheme_params;

// Every split of l's rows into 1..5 parts: slices in order, no gaps, the other rows untouched, and
// each value equal to `want`.
void check_slices(const Linear& l, const float* x, const std::vector<float>& want, const std::string& what) {
  ASSERT_TRUE(l.has_gemv_slices()) << what;
  const int64_t n = l.out_features();
  for (int parts = 1; parts <= 5; ++parts) {
    std::vector<float> y(size_t(n), -7.0f);
    int64_t next = 0;
    for (int part = 0; part < parts; ++part) {
      std::vector<float> before = y;
      const RowSlice rs = l.gemv_slice(x, part, parts, y.data());
      ASSERT_EQ(rs.r0, next) << what << " parts " << parts << " part " << part;
      ASSERT_LE(rs.r0, rs.r1) << what;
      for (int64_t i = 0; i < n; ++i)
        if (i < rs.r0 || i >= rs.r1) ASSERT_EQ(y[size_t(i)], before[size_t(i)]) << what << " wrote row " << i;
      next = rs.r1;
    }
    ASSERT_EQ(next, n) << what << " parts " << parts;
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(y[size_t(i)], want[size_t(i)]) << what << " parts " << parts << " row " << i;
  }
}

class GemvSlices : public ::testing::TestWithParam<KernelLevel> {
 protected:
  void SetUp() override { set_kernel_level(GetParam()); }
  void TearDown() override { set_kernel_level(max_kernel_level()); }
};

TEST_P(GemvSlices, DenseSlicesEqualForward) {
  struct S {
    int64_t n, k;
  };
  for (Compute c : {Compute::F32, Compute::BF16})
    for (S s : {S{1, 1}, S{48, 576}, S{49, 577}, S{97, 130}, S{300, 257}, S{17, 8193}})  // 8193: past a K slice
      for (bool with_bias : {false, true}) {
        const auto w = randn(size_t(s.n * s.k), uint32_t(s.n + s.k));
        const auto x = randn(size_t(s.k), 5);
        const auto b = randn(size_t(s.n), 6);
        auto l = make_dense_linear(w.data(), s.n, s.k, with_bias ? b.data() : nullptr, c);
        if (!l->has_gemv_slices()) {  // the scalar reference: forward() only
          EXPECT_EQ(GetParam(), KernelLevel::Scalar);
          continue;
        }
        std::vector<float> want(size_t(s.n));
        l->forward(x.data(), 1, want.data());
        check_slices(
            *l, x.data(), want,
            l->kind() + " n " + std::to_string(s.n) + " k " + std::to_string(s.k) + (with_bias ? " bias" : ""));
      }
}

// One token runs the family's streaming GEMV (kernels/panel_gemv.h), a batch the tiles: the token's
// row of a batch must have the same bits — f32 and bf16-avx512 (the AMX tiles sum in another order:
// test_amx.cpp bounds them against the reference, at one token too). Shapes: several chunks of
// four panels and a short last one, features past a panel's end, K past the 4096 slice with bias.
TEST_P(GemvSlices, OneTokenHasTheBatchTilesBits) {
  struct S {
    int64_t n, k;
  };
  for (Compute c : {Compute::F32, Compute::BF16}) {
    if (std::string(kernels::dense_kernel_name(c)) == "bf16-amx") continue;
    for (S s : {S{1, 3}, S{48, 576}, S{300, 257}, S{433, 130}, S{97, 8193}})
      for (bool with_bias : {false, true}) {
        const int64_t m = 5, row = 3;
        const auto w = randn(size_t(s.n * s.k), uint32_t(7 * s.n + s.k));
        const auto x = randn(size_t(m * s.k), 8);
        const auto b = randn(size_t(s.n), 9);
        auto l = make_dense_linear(w.data(), s.n, s.k, with_bias ? b.data() : nullptr, c);
        std::vector<float> batch(size_t(m * s.n)), one(size_t(s.n) + 16, -7.0f);
        l->forward(x.data(), m, batch.data());
        l->forward(x.data() + row * s.k, 1, one.data());
        const std::string what = l->kind() + " n " + std::to_string(s.n) + " k " + std::to_string(s.k);
        for (int64_t i = 0; i < s.n; ++i)
          ASSERT_EQ(std::memcmp(&one[size_t(i)], &batch[size_t(row * s.n + i)], 4), 0)
              << what << " feature " << i << ": " << one[size_t(i)] << " vs " << batch[size_t(row * s.n + i)];
        for (size_t i = size_t(s.n); i < one.size(); ++i) ASSERT_EQ(one[i], -7.0f) << what << ": wrote past y";
      }
  }
}

TEST_P(GemvSlices, IntegerSlicesEqualReferenceBitForBit) {
  struct S {
    int64_t n, k;
  };
  for (auto p : {scheme_params("int8", 8, 0), scheme_params("int8", 8, 64), scheme_params("int8", 8, 128),
                 scheme_params("int8_ct", 8, 0, DType::BF16), scheme_params("int4", 4, 128)})
    for (S s : {S{37, 256}, S{16, 384}, S{130, 128}, S{576, 1536}, S{3, 128}})
      for (bool with_bias : {false, true}) {
        auto w = randn(size_t(s.n * s.k), uint32_t(s.n * 131 + s.k), 0.05f);
        w[0] = 0.3f;  // an outlier sets one group's scale
        const auto x = randn(size_t(s.k), uint32_t(s.k));
        const auto b = randn(size_t(s.n), 99);
        const PackedTensor pt = quantize_weights(w.data(), s.n, s.k, p);
        std::vector<float> want(size_t(s.n));
        reference_gemm(pt, x.data(), 1, want.data(), ActMode::Int8PerToken);
        if (with_bias)
          for (int64_t i = 0; i < s.n; ++i) want[size_t(i)] += b[size_t(i)];
        auto l = make_packed_linear(pt, with_bias ? b.data() : nullptr, PackedLinearOptions{});
        const std::string what = p.scheme + " group " + std::to_string(p.group_size) + " n " + std::to_string(s.n) +
                                 " k " + std::to_string(s.k) + (with_bias ? " bias" : "");
        if (!l->has_gemv_slices()) {
          EXPECT_EQ(GetParam(), KernelLevel::Scalar) << what;
          continue;
        }
        check_slices(*l, x.data(), want, what);
      }
}

// MLX affine-4 through int8 tokens per group or per token (kernels/affine_i8.h) slices with
// forward()'s bits; the weight-only Linears without int8 tokens keep the per-Linear path.
TEST_P(GemvSlices, WeightOnlySlicesEqualForward) {
  struct C {
    SchemeParams p;
    WeightAct act;
  };
  const std::vector<C> cases = {{scheme_params("affine", 4, 64, DType::BF16), WeightAct::Default},
                                {scheme_params("nf4", 4, 64, DType::BF16), WeightAct::Default},
                                {scheme_params("affine", 4, 64, DType::BF16), WeightAct::Int8Group},
                                {scheme_params("affine", 4, 32), WeightAct::Int8Token}};
  for (const C& c : cases)
    for (int64_t n : {37, 130})
      for (bool with_bias : {false, true}) {
        const int64_t k = 384;
        const auto w = randn(size_t(n * k), uint32_t(n + 3), 0.1f);
        const auto x = randn(size_t(k), 12);
        const auto b = randn(size_t(n), 13);
        PackedLinearOptions opt;
        opt.weight_act = c.act;
        auto l = make_packed_linear(quantize_weights(w.data(), n, k, c.p), with_bias ? b.data() : nullptr, opt);
        const std::string what = l->kind() + " n " + std::to_string(n) + (with_bias ? " bias" : "");
        if (c.act == WeightAct::Default || GetParam() == KernelLevel::Scalar) {
          EXPECT_FALSE(l->has_gemv_slices()) << what;
          continue;
        }
        std::vector<float> want(static_cast<size_t>(n));
        l->forward(x.data(), 1, want.data());
        check_slices(*l, x.data(), want, what);
      }
}

INSTANTIATE_TEST_SUITE_P(Levels, GemvSlices, ::testing::ValuesIn(available_kernel_levels()),
                         [](const auto& info) { return std::string(kernel_level_name(info.param)); });

// A factory quantizing every projection (and the tied head) in memory: W8A8 per channel, or MLX
// affine-4 g64 with bf16 scales through int8 tokens (the int8 panels).
LinearFactory packed_factory(SchemeParams p, WeightAct act = WeightAct::Default) {
  return [p, act](const std::string&, const Tensor& w, const Tensor*) -> std::unique_ptr<Linear> {
    const std::vector<float> f = to_f32(w);
    PackedLinearOptions opt;
    opt.weight_act = act;
    return make_packed_linear(quantize_weights(f.data(), w.shape[0], w.shape[1], p), nullptr, opt);
  };
}

// Logits of `steps` single tokens after a prompt; `per_linear` takes the per-Linear path (an
// observer turns the decode step off).
std::vector<float> step_logits(LlamaModel& model, const std::vector<int32_t>& prompt, int steps, bool per_linear,
                               const std::string& kv) {
  model.set_observer(per_linear ? LinearObserver([](const std::string&, const float*, int64_t, int64_t) {})
                                : LinearObserver());
  const int vocab = int(model.config().vocab);
  auto cache = model.make_cache(int(prompt.size()) + steps, kv);
  std::vector<float> out(size_t(steps) * vocab);
  std::vector<float> row(static_cast<size_t>(vocab));
  model.forward(prompt.data(), int(prompt.size()), 0, *cache, int(prompt.size()) - 1, 1, row.data());
  int32_t tok = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
  for (int i = 0; i < steps; ++i) {
    model.forward(&tok, 1, int(prompt.size()) + i, *cache, 0, 1, out.data() + size_t(i) * vocab);
    const float* r = out.data() + size_t(i) * vocab;
    tok = int32_t(std::max_element(r, r + vocab) - r);
  }
  return out;
}

TEST(DecodeStep, EqualsPerLinearPathBitForBit) {
  QT_REQUIRE_FILE(test::model_gguf());
  const int saved = omp_get_max_threads();
  const std::string names[] = {"f32", "w8a8", "affine4-a8"};
  for (const std::string& name : names) {
    Checkpoint ck = load_checkpoint(test::model_gguf());
    const std::vector<int32_t> prompt = ck.tokenizer->encode("The history of the city begins", true);
    const SchemeParams a4 = scheme_params("affine", 4, 64, DType::BF16);
    LlamaModel model(std::move(ck), name == "f32"    ? dense_linear_factory(Compute::F32)
                                    : name == "w8a8" ? packed_factory(scheme_params("int8", 8, 0))
                                                     : packed_factory(a4, WeightAct::Int8Group));
    // f16: every thread attends to its own heads; kivi (a quantized cache): thread 0 alone.
    for (const char* kv : {"f16", "kivi:bits=4"})
      for (int threads : {2, 3}) {
        if (std::string(kv) != "f16" && threads != 2) continue;
        omp_set_num_threads(threads);
        const auto want = step_logits(model, prompt, 4, true, kv);
        const auto got = step_logits(model, prompt, 4, false, kv);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], want[i]) << name << " " << kv << " threads " << threads << " at " << i;
      }
  }
  omp_set_num_threads(saved);
}

}  // namespace
