// The nvfp4 and mxfp4 rows (libquant/schemes/nvfp4.cpp, mxfp4.cpp, e2m1.h) against compressed-tensors'
// own NVFP4 / MXFP4 compressors: tests/golden/schemes/nvfp4.safetensors, made by
// tests/golden/make_nvfp4_golden.py with compressed-tensors 0.20.0. Codes, scales, the global scale
// and the dequantized weights bit for bit; the grid (GPTQ's steps) equal to quantize; the _a4 rows'
// activation rounding equal to the package's fake quantization; the Linear's output.
#include <cstring>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/e2m1.h"
#include "libquant/schemes/grid.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

using qt::DType;
using qt::PackedTensor;

namespace {

const qt::SafetensorsFile& golden() {
  static qt::SafetensorsFile f =
      qt::SafetensorsFile::open(qt::test::source_dir() + "/tests/golden/schemes/nvfp4.safetensors");
  return f;
}

void expect_bytes(const qt::Tensor& got, const qt::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.nbytes, want.nbytes) << what;
  int bad = 0;
  for (size_t i = 0; i < got.nbytes; ++i)
    if (got.data[i] != want.data[i] && bad++ < 5)
      ADD_FAILURE() << what << " byte " << i << ": " << int(got.data[i]) << " vs " << int(want.data[i]);
  EXPECT_EQ(bad, 0) << what;
}

void expect_floats(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0 && bad++ < 5)
      ADD_FAILURE() << what << " [" << i << "]: " << got[i] << " vs " << want[i];
  EXPECT_EQ(bad, 0) << what;
}

qt::SchemeParams params(const char* scheme, const std::string& dt) {
  qt::SchemeParams p = qt::default_params(scheme);
  p.dtype = dt == "bf16" ? DType::BF16 : DType::F32;
  return p;
}

TEST(Fp4Ct, E2M1RoundsHalfToEvenAndKeepsTheSignOfNegativeZeros) {
  const float in[] = {0.25f, 0.26f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.01f, 6.0f, -0.1f, -0.0f, -5.5f};
  const int want[] = {0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 8, 0, 15};
  for (size_t i = 0; i < std::size(in); ++i) EXPECT_EQ(qt::e2m1_code(in[i]), want[i]) << in[i];
}

// e2m1_value (the table-free form the GPU decodes with) is the table, −0 for code 8 included.
TEST(Fp4Ct, E2M1ValueIsTheTable) {
  for (int c = 0; c < 16; ++c) {
    const float v = qt::e2m1_value(c);
    EXPECT_EQ(std::memcmp(&v, &qt::kE2M1Values[c], 4), 0) << c << ": " << v;
  }
}

// quantize_weights equals the package's compressor: packed codes, scales (E4M3 / E8M0), the global
// scale, and dequantize_weights its decompress — for f32 and bf16 weights.
TEST(Fp4Ct, WeightsEqualCompressedTensorsCompressors) {
  for (const char* scheme : {"nvfp4", "mxfp4"})
    for (const std::string dt : {"f32", "bf16"}) {
      const std::string pre = std::string(scheme) + "." + dt;
      const std::vector<float> w = qt::to_f32(golden().get("w." + dt));
      const PackedTensor t = qt::quantize_weights(w.data(), 48, 128, params(scheme, dt));
      expect_bytes(t.data, golden().get(pre + ".packed"), pre + " codes");
      expect_bytes(t.scales, golden().get(pre + ".scale"), pre + " scales");
      if (std::string(scheme) == "nvfp4") expect_bytes(t.biases, golden().get(pre + ".global"), pre + " global scale");
      expect_floats(qt::dequantize_weights(t), qt::to_f32(golden().get(pre + ".deq")), pre + " dequantized");
      // A tensor quantized in chunks of rows (convert's path) takes its global scale from all of it.
      qt::Tensor src = golden().get("w." + dt);
      const PackedTensor c = qt::quantize_tensor(src, params(scheme, dt));
      expect_bytes(c.data, t.data, pre + " quantize_tensor codes");
      expect_bytes(c.scales, t.scales, pre + " quantize_tensor scales");
    }
}

// The grid's steps (fit_rtn, stored, code, pack), as GPTQ drives them, give quantize's bytes; its
// values are dequantize's.
TEST(Fp4Ct, GridStepsEqualQuantize) {
  for (const char* scheme : {"nvfp4", "nvfp4_a4", "mxfp4", "mxfp4_a4"})
    for (const std::string dt : {"f32", "bf16"}) {
      const std::vector<float> w = qt::to_f32(golden().get("w." + dt));
      const qt::SchemeParams p = params(scheme, dt);
      const PackedTensor want = qt::quantize_weights(w.data(), 48, 128, p);
      const std::vector<float> deq = qt::dequantize_weights(want);
      const qt::SchemeGrid grid = qt::SchemeGrid(p).for_weight(w.data(), 48, 128);
      const int64_t gl = grid.group_len(128), ng = 128 / gl;
      std::vector<qt::GroupParams> gp(size_t(48 * ng));
      std::vector<int16_t> codes(48 * 128);
      std::vector<float> values(48 * 128);
      for (int64_t r = 0; r < 48; ++r)
        for (int64_t g = 0; g < ng; ++g) {
          const qt::GroupParams s = grid.stored(grid.fit_rtn(&w[size_t(r * 128 + g * gl)], gl));
          EXPECT_EQ(grid.stored(s).scale, s.scale) << scheme << " stored() is idempotent";
          gp[size_t(r * ng + g)] = s;
          for (int64_t j = g * gl; j < (g + 1) * gl; ++j) {
            codes[size_t(r * 128 + j)] = int16_t(grid.code(w[size_t(r * 128 + j)], s));
            values[size_t(r * 128 + j)] = grid.value(codes[size_t(r * 128 + j)], s);
          }
        }
      const PackedTensor got = grid.pack(codes.data(), gp.data(), 48, 128);
      const std::string what = std::string(scheme) + "." + dt;
      expect_bytes(got.data, want.data, what + " grid codes");
      expect_bytes(got.scales, want.scales, what + " grid scales");
      if (want.biases.data) expect_bytes(got.biases, want.biases, what + " grid global scale");
      expect_floats(values, deq, what + " grid values");
    }
}

// The _a4 rows' activations equal the package's fake quantization (NVFP4: its global scale from
// each token's own absmax; MXFP4: dynamic per group of 32).
TEST(Fp4Ct, ActivationRoundingEqualsFakeQuantize) {
  const std::vector<float> x = qt::to_f32(golden().get("act.x"));
  std::vector<float> nv = x, mx = x;
  qt::round_activations_nvfp4(nv.data(), 8, 256);
  qt::round_activations_mxfp4(mx.data(), 8, 256);
  expect_floats(nv, qt::to_f32(golden().get("act.nvfp4")), "nvfp4 activations");
  expect_floats(mx, qt::to_f32(golden().get("act.mxfp4")), "mxfp4 activations");
}

// The Linear multiplies the dequantized weights (after rounding the activations for _a4 rows).
TEST(Fp4Ct, LinearIsTheDenseProductOfTheDequantizedWeights) {
  const std::vector<float> w = qt::to_f32(golden().get("w.bf16"));
  std::vector<float> x(3 * 128);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 37 % 101) - 50) / 25.0f;
  for (const char* scheme : {"nvfp4", "nvfp4_a4", "mxfp4", "mxfp4_a4"}) {
    const PackedTensor t = qt::quantize_weights(w.data(), 48, 128, params(scheme, "bf16"));
    const std::vector<float> deq = qt::dequantize_weights(t);
    std::vector<float> xa = x;
    if (std::string(scheme) == "nvfp4_a4") qt::round_activations_nvfp4(xa.data(), 3, 128);
    if (std::string(scheme) == "mxfp4_a4") qt::round_activations_mxfp4(xa.data(), 3, 128);
    auto lin = qt::make_packed_linear(t, nullptr);
    std::vector<float> y(3 * 48);
    lin->forward(x.data(), 3, y.data());
    for (int64_t m = 0; m < 3; ++m)
      for (int64_t n = 0; n < 48; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < 128; ++k) acc += double(xa[size_t(m * 128 + k)]) * double(deq[size_t(n * 128 + k)]);
        EXPECT_NEAR(y[size_t(m * 48 + n)], acc, 1e-4 * (1 + std::abs(acc))) << scheme << " " << m << "," << n;
      }
    std::vector<float> row(128);
    lin->dequantize_row(5, row.data());
    EXPECT_EQ(row, std::vector<float>(deq.begin() + 5 * 128, deq.begin() + 6 * 128)) << scheme;
  }
}

TEST(Fp4Ct, RefusesShapesTheFormatCannotHold) {
  qt::SchemeParams p = qt::default_params("nvfp4");
  std::string why;
  EXPECT_FALSE(qt::scheme_fits(p, 4, 40, &why));  // 16 does not divide 40
  p.group_size = 32;
  EXPECT_FALSE(qt::scheme_fits(p, 4, 64, &why));
  EXPECT_FALSE(qt::scheme_fits(qt::default_params("mxfp4"), 4, 48, &why));
}

}  // namespace
