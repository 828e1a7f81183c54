// FP8_BLOCK (`--scheme fp8_block`, libquant/schemes/fp8_block.cpp): E4M3 weights with one scale per
// 128×128 block, activations rounded to E4M3 in dynamic groups of 128 columns.
// References: tests/golden/schemes/fp8_block.safetensors (tests/golden/make_fp8_block_golden.py:
// compressed-tensors 0.20's own compressor, decompressor and fake quantization for the FP8_BLOCK
// preset) and the package's config (tests/golden/quant_export/ct_fp8_block_config.json).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/model/llama.h"
#include "libquant/schemes/packed_io.h"
#include "libquant/schemes/grid.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

namespace qt {
namespace {

const SafetensorsFile& golden() {
  static SafetensorsFile f = SafetensorsFile::open(test::source_dir() + "/tests/golden/schemes/fp8_block.safetensors");
  return f;
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  EXPECT_EQ(got.dtype, want.dtype) << what;
  EXPECT_EQ(got.shape, want.shape) << what;
  ASSERT_EQ(got.nbytes, want.nbytes) << what;
  int bad = 0;
  for (size_t i = 0; i < got.nbytes; ++i)
    if (got.data[i] != want.data[i] && bad++ < 5)
      ADD_FAILURE() << what << " byte " << i << ": " << int(got.data[i]) << " vs " << int(want.data[i]);
  EXPECT_EQ(bad, 0) << what;
}

SchemeParams params(DType dt) {
  SchemeParams p = default_params("fp8_block");
  p.dtype = dt;
  return p;
}

// Codes, block scales (the padded last row block, an all-zero block's eps, a block holding one tiny
// value) and dequantized values equal the package's, in fp32 and bf16.
TEST(Fp8Block, WeightsEqualCompressedTensors) {
  for (const char* dt : {"f32", "bf16"}) {
    SCOPED_TRACE(dt);
    const Tensor& src = golden().get(std::string("w.") + dt);
    const std::vector<float> w = to_f32(src);
    const PackedTensor t = quantize_weights(w.data(), 160, 256, params(src.dtype));
    const std::string g = std::string("fp8b.") + dt;
    expect_same(t.data, golden().get(g + ".weight"), "codes");
    expect_same(t.scales, golden().get(g + ".scale"), "scales");
    const std::vector<float> deq = dequantize_weights(t);
    const std::vector<float> want = to_f32(golden().get(g + ".deq"));
    ASSERT_EQ(deq.size(), want.size());
    EXPECT_EQ(0, std::memcmp(deq.data(), want.data(), 4 * deq.size()));
  }
}

TEST(Fp8Block, ActivationGroupsEqualFakeQuantize) {
  std::vector<float> x = to_f32(golden().get("act.x"));
  round_activations_fp8_groups(x.data(), 8, 384);
  const std::vector<float> want = to_f32(golden().get("act.deq"));
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &want[i], 4) != 0 && bad++ < 5) ADD_FAILURE() << i << ": " << x[i] << " vs " << want[i];
  EXPECT_EQ(bad, 0);
}

// convert's chunked quantize_tensor cuts a tall weight at whole row blocks: quantize_weights' bytes.
TEST(Fp8Block, ChunkedQuantizeEqualsWholeWeight) {
  std::vector<float> w = test::randn(size_t(600 * 256), 3, 0.02f);
  const PackedTensor whole = quantize_weights(w.data(), 600, 256, params(DType::F32));
  const PackedTensor chunked = quantize_tensor(Tensor::from_f32(w, {600, 256}), params(DType::F32));
  expect_same(chunked.data, whole.data, "codes");
  expect_same(chunked.scales, whole.scales, "scales");
}

// The Linear multiplies the rounded activations by e4m3·scale in fp32, as the package's forward
// does in an fp32 model (and FP8 block GEMMs): not by the decompressed (bf16-rounded) weight.
TEST(Fp8Block, LinearIsThePackagesForward) {
  const std::vector<float> w = to_f32(golden().get("w.bf16"));
  const PackedTensor t = quantize_weights(w.data(), 160, 256, params(DType::BF16));
  const std::vector<float> x = to_f32(golden().get("lin.x")), want = to_f32(golden().get("lin.y"));
  auto lin = make_packed_linear(t, nullptr);
  std::vector<float> y(3 * 160);
  lin->forward(x.data(), 3, y.data());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 2e-6 * (1 + std::abs(want[i]))) << i;
}

// Widths 128 does not divide are not this row's (the package's activation groups refuse them);
// rows need not be whole blocks; the calibrated quantizers refuse block scales.
TEST(Fp8Block, ShapesAndCalibrationItRefuses) {
  std::string why;
  EXPECT_FALSE(scheme_fits(params(DType::BF16), 256, 576, &why));
  EXPECT_NE(why.find("does not divide"), std::string::npos) << why;
  EXPECT_TRUE(scheme_fits(params(DType::BF16), 200, 1536));
  EXPECT_FALSE(SchemeGrid(params(DType::BF16)).fits(256, 256, &why));
  EXPECT_NE(why.find("blocks of 128 rows"), std::string::npos) << why;
}

// `convert --scheme fp8_block`: a 128-wide llama written as compressed-tensors float-quantized
// with the package's FP8_BLOCK config; codes read back as quantize_weights gives them (the
// package's bytes, above), scales [ceil(out/128), in/128]; the model evaluates near its source.
TEST(Fp8Block, ConvertWritesThePackagesPreset) {
  const std::string tmp = test::temp_dir("fp8_block"), src = tmp + "/src", out = tmp + "/out";
  test::write_wide_llama(src, 1, 0.05f);
  const std::string L = "model.layers.0.";
  std::string log;
  const std::string bin = test::quanttool_bin() + " convert --in " + src + " --out ";
  ASSERT_EQ(test::run_cmd(bin + out + " --scheme fp8_block --dtype bf16", &log), 0) << log;
  EXPECT_EQ(test::read_json(out + "/config.json")["quantization_config"],
            test::read_json(test::source_dir() + "/tests/golden/quant_export/ct_fp8_block_config.json"));
  Checkpoint s = load_checkpoint(src), c = load_checkpoint(out);
  EXPECT_EQ(c.source_kind, "compressed-tensors");
  const std::pair<const char*, std::vector<int64_t>> scales[] = {
      {"self_attn.k_proj", {1, 1}}, {"mlp.gate_proj", {2, 1}}, {"mlp.down_proj", {1, 2}}};
  for (auto& [m, shape] : scales) {
    SCOPED_TRACE(m);
    EXPECT_EQ(c.get(L + m + ".weight_scale").shape, shape);
    const auto p = packed_weight(c, L + m + ".weight");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->params.scheme, "fp8_block");
    const Tensor& w = s.get(L + m + ".weight");
    std::vector<float> wb = to_f32(w);
    for (float& x : wb) x = bf16_to_f32(f32_to_bf16(x));
    const PackedTensor ref = quantize_weights(wb.data(), w.shape[0], w.shape[1], params(DType::BF16));
    EXPECT_EQ(0, std::memcmp(p->data.data, ref.data.data, ref.data.nbytes));
    EXPECT_EQ(0, std::memcmp(p->scales.data, ref.scales.data, ref.scales.nbytes));
  }
  const std::vector<int32_t> ids = {1, 5, 9, 33, 60, 2, 17, 40};
  auto logits = [&](const Checkpoint& ck) {
    LlamaModel m(ck, checkpoint_linear_factory(ck, {}));
    auto cache = m.make_cache(8);
    std::vector<float> out(size_t(8 * ck.config.vocab));
    m.forward(ids.data(), 8, 0, *cache, 0, 8, out.data());
    return out;
  };
  const std::vector<float> a = logits(s), b = logits(c);
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += a[i] * a[i];
  EXPECT_LT(std::sqrt(num / den), 0.05);  // E4M3's 3 mantissa bits: a few % of the logits
  EXPECT_GT(std::sqrt(num / den), 1e-4);  // ... and the rounding did happen
  // A model none of whose Linears 128 divides has nothing to write as FP8_BLOCK.
  const std::string tiny = test::source_dir() + "/tests/golden/logits/tiny-llama3";
  EXPECT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + tiny + " --out " + tmp + "/bad --scheme fp8_block",
                          &log),
            2);
  EXPECT_NE(log.find("error:"), std::string::npos) << log;
}

}  // namespace
}  // namespace qt
