// NVFP4, MXFP4 and FP8_BLOCK on the GPU (libquant/cuda/blockfp.cu) against the CPU's
// DequantizedLinear rows: the per-layer decode equals dequantize_weights bit for bit (nvfp4,
// mxfp4: values exact in bf16) and kernel_values rounded to bf16 (fp8_block); the activation
// rounding equals round_activations_nvfp4 / _mxfp4 / _fp8_groups bit for bit; whole models
// converted to each row run on the GPU near the CPU's forward of the same folder.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "libquant/schemes/packed_io.h"
#include "tests/cuda_support.h"

namespace qt {
namespace {

using namespace cudatest;

// Bit for bit, −0 apart from +0.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (bits_of(got[i]) != bits_of(want[i]) && !(std::isnan(got[i]) && std::isnan(want[i]))) first = bad++ ? first : i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size() << " differ; first at " << first << ": gpu "
                     << got[first] << " cpu " << want[first];
}

// A weight with outlier columns, a zero row and a row of tiny values (E4M3 / E8M0 scales at the
// bottom of their range).
std::vector<float> test_weight(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> w = randn(size_t(rows * cols), seed, 0.05f);
  for (int64_t j = 0; j < cols; j += 37) w[size_t(j)] *= 50.0f;
  if (rows > 3) {
    std::fill(w.begin() + 2 * cols, w.begin() + 3 * cols, 0.0f);
    for (int64_t j = 0; j < cols; ++j) w[size_t(3 * cols + j)] *= 1e-6f;
  }
  return w;
}

// q|k|v-like parts of different heights (fp8_block: one part not a multiple of 128 rows) stacked
// as the forward stacks them, each with its own scales (nvfp4: its own global scale).
TEST(CudaFp4, DecodeEqualsTheCpusWeights) {
  QT_REQUIRE_GPU();
  struct Case {
    const char* scheme;
    int bits, group;
    DType dt;
  };
  for (const Case c :
       {Case{"nvfp4", 4, 16, DType::BF16}, Case{"nvfp4", 4, 16, DType::F32}, Case{"mxfp4", 4, 32, DType::BF16},
        Case{"fp8_block", 8, 128, DType::BF16}, Case{"fp8_block", 8, 128, DType::F32}}) {
    const std::string what = std::string(c.scheme) + " " + dtype_name(c.dt);
    const int64_t cols = 384;
    std::vector<PackedTensor> parts;
    for (int64_t rows : {160, 64, 48})
      parts.push_back(quantize_weights(test_weight(rows, cols, uint32_t(rows)).data(), rows, cols,
                                       test::scheme_params(c.scheme, c.bits, c.group, c.dt)));
    std::vector<float> want;
    for (const PackedTensor& p : parts) {
      const Scheme& row = find_scheme(p.params.scheme);
      std::vector<float> v(size_t(p.rows * p.cols));
      if (row.kernel_values) {
        row.kernel_values(p, v.data());
        for (float& x : v) x = bf16v(x);  // the bf16 GEMM's operand
      } else {
        v = dequantize_weights(p);
        for (float x : v) ASSERT_EQ(bits_of(bf16v(x)), bits_of(x)) << what << ": a value not exact in bf16";
      }
      want.insert(want.end(), v.begin(), v.end());
    }
    std::vector<const PackedTensor*> pp;
    for (const PackedTensor& p : parts) pp.push_back(&p);
    expect_same_bits(cuda::testing::blockfp_dequant(pp), want, what);
  }
}

// Tokens with an outlier, a zero token, a zero group, tiny and huge values; widths of whole warps'
// chunks and of a partial one (nvfp4 48, mxfp4 96). Both of the kernel's forms: fp32 out, and bf16
// out (what the forward's GEMMs read).
TEST(CudaFp4, ActivationRoundingEqualsTheCpu) {
  QT_REQUIRE_GPU();
  for (const char* scheme : {"nvfp4_a4", "mxfp4_a4", "fp8_block"})
    for (int k : {384, 48, 96, 1152}) {
      const Scheme& row = find_scheme(scheme);
      const int g = row.default_group_size;
      if (k % g) continue;
      const std::string what = std::string(scheme) + " k " + std::to_string(k);
      const int rows = 37;
      std::vector<float> x = randn(size_t(rows) * k, uint32_t(k), 2.0f);
      x[5] = 300.0f;
      std::fill(x.begin() + 2 * k, x.begin() + 3 * k, 0.0f);                     // a zero token
      std::fill(x.begin() + 4 * k, x.begin() + 4 * k + g, 0.0f);                 // a zero group
      for (int j = 0; j < k; ++j) x[size_t(6 * k + j)] *= 1e-30f;                // tiny scales
      for (int j = 0; j < k; j += 7) x[size_t(7 * k + j)] *= 1e30f;              // huge ones
      for (int j = 0; j < g; ++j) x[size_t(8 * k + j)] = j % 2 ? 1e-20f : 5.0f;  // a wide group
      std::vector<float> want = x;
      row.round_activations(want.data(), rows, k);
      expect_same_bits(cuda::testing::round_activations(row, x, rows, k, 0), want, what + " fp32");
      std::vector<float> want_b = want;
      for (float& v : want_b) v = bf16v(v);
      expect_same_bits(cuda::testing::round_activations(row, x, rows, k, 1), want_b, what + " bf16");
      if (std::string(scheme) != "nvfp4_a4") continue;
      // The factored form the forward multiplies (blockfp.h): q·e exact in bf16, and the token's
      // global scale; (q·e)/gs is the CPU's q·fp32(e/gs) within the two fp32 roundings apart.
      const std::vector<float> f = cuda::testing::round_activations(row, x, rows, k, 2);
      ASSERT_EQ(f.size(), size_t(rows) * k + rows);
      for (int t = 0; t < rows; ++t) {
        float amax = 0.0f;
        for (int j = 0; j < k; ++j) amax = std::max(amax, std::abs(x[size_t(t) * k + j]));
        float gs = (1.0f / std::max(amax, std::numeric_limits<float>::min())) * 2688.0f;
        gs = std::isfinite(gs) ? gs : 1.0f;
        ASSERT_EQ(bits_of(f[size_t(rows) * k + t]), bits_of(gs)) << what << " token " << t;
        for (int j = 0; j < k; ++j) {
          const double got = double(f[size_t(t) * k + j]) / gs, w = want[size_t(t) * k + j];
          ASSERT_LE(std::abs(got - w), std::ldexp(std::abs(w), -22)) << what << " [" << t << ", " << j << "]";
        }
      }
    }
}

// Each row converted (the tiny llama; fp8_block the 128-wide one) and run on the GPU against the
// CPU's forward of the same folder. Weight-only rows: the bar of the affine and NF4 layouts
// (TinyLlamaAffine4MatchesCpu): within 1.5x the dense model's bf16 error. Rows that round
// activations: the W8A8 bar (the bf16 GEMMs' last-bit differences move a value a whole step where
// it sits on a rounding boundary): within 0.1 of the logits' magnitude or 1.5x the CPU's own
// bf16-against-fp32 GEMM spread on the folder, whichever is larger (W4A4's E2M1 activations turn
// last-bit differences into whole steps more often than int8's); and, for the E2M1 rows
// (steps of a third to a half of a value, where such moves are rare), the rounding is there: the
// GPU at most 0.7x as far from the CPU as the CPU's own forward without the rounding is (a GPU
// that skipped it would sit at about 1x). E4M3's steps are 8x finer, so bf16's error crosses its
// boundaries about 8x as often; fp8_block prints that ratio without a bar (its formula is held
// bit for bit above).
TEST(CudaFp4, ModelsMatchTheCpu) {
  QT_REQUIRE_GPU();
  const std::string wide = test::temp_dir("cuda-fp4-wide") + "/src";
  write_wide_llama(wide);
  const auto ids = random_ids(40, 17);
  for (const char* scheme : {"nvfp4", "mxfp4", "nvfp4_a4", "mxfp4_a4", "fp8_block"}) {
    SCOPED_TRACE(scheme);
    const bool fp8 = std::string(scheme) == "fp8_block";
    const std::string src = fp8 ? wide : tiny_dir();
    const std::string dir = test::temp_dir(std::string("cuda-fp4-") + scheme) + "/m";
    std::string log;
    ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + src + " --out " + dir + " --scheme " + scheme +
                                " --dtype bf16",
                            &log),
              0)
        << log;
    Checkpoint a = load_checkpoint(dir);
    ASSERT_TRUE(packed_weight(a, "model.layers.0.mlp.down_proj.weight").has_value());
    const Scheme& row = find_scheme(scheme);
    LlamaModel cpu(a, checkpoint_linear_factory(a, {}));
    const auto want = model_logits(cpu, ids, "f16");
    Checkpoint d = load_checkpoint(src);
    const double bf16_err = rms_diff(cpu_logits(d, Compute::BF16, "f16", ids), cpu_logits(d, Compute::F32, "f32", ids));
    cuda::GpuModel gpu(load_checkpoint(dir));
    EXPECT_EQ(gpu.kind(), scheme);
    const auto got = cuda::forward_logits(gpu, ids);
    ASSERT_EQ(got.size(), want.size());
    const double e = rms_diff(got, want), mag = rms_diff(want, std::vector<float>(want.size(), 0.0f));
    if (!row.round_activations) {
      std::printf("%-9s gpu-cpu rms %.5f (dense bf16 error rms %.5f)\n", scheme, e, bf16_err);
      EXPECT_LT(e, 1.5 * bf16_err) << "gpu vs cpu, against the dense model's bf16 error";
      continue;
    }
    PackedLinearOptions no_round;
    no_round.act = ActMode::None;
    LlamaModel cpu_w(a, checkpoint_linear_factory(a, no_round));
    const double e_act = rms_diff(model_logits(cpu_w, ids, "f16"), want);
    // The CPU's own kernel-level spread on this folder: its bf16 GEMMs against its fp32 ones.
    PackedLinearOptions bf16_gemms;
    bf16_gemms.compute = Compute::BF16;
    LlamaModel cpu_b(a, checkpoint_linear_factory(a, bf16_gemms));
    const double spread = rms_diff(model_logits(cpu_b, ids, "f16"), want);
    std::printf(
        "%-9s gpu-cpu rms %.5f (cpu logits rms %.5f; cpu bf16 gemms %.5f away; cpu without the activation rounding "
        "%.5f away)\n",
        scheme, e, mag, spread, e_act);
    EXPECT_LT(e, std::max(0.1 * mag, 1.5 * spread));
    if (!fp8) {
      EXPECT_LT(e, 0.7 * e_act) << "the GPU does not round the activations as the CPU does";
    }
  }
}

}  // namespace
}  // namespace qt
