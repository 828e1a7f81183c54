// Weight quantization schemes (libquant/schemes).
// References: golden vectors in tests/golden/schemes/ made by tests/golden/make_scheme_goldens.py
// with the libraries that define each format — mlx.core.quantize / dequantize on the CPU (mlx
// 0.32.4) for affine; bitsandbytes 0.50.2 quantize_4bit / dequantize_4bit on CPU tensors for
// nf4/fp4; compressed-tensors 0.20.0 (calculate_qparams + its int-quantized compressor) for
// int8_ct, its float-quantized compressor (FP8_DYNAMIC) for fp8; a numpy restatement of Cider's int8/int4 functions (cider/ops.py) for int8/int4 and the
// per-token activation quantizer. Packed codes, scales and biases must match byte for byte and
// dequantized values bit for bit. The scalar reference GEMM is checked against an fp32 GEMM of the
// dequantized weights (weight-only: summation error only; int8 activations: within the bound
// the activation rounding allows, and tightly against the same product with the quantized
// activations dequantized).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "formats/error.h"
#include "formats/safetensors.h"
#include "libquant/cpu_features.h"
#include "libquant/schemes/packed_values.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

using qt::DType;
using qt::PackedTensor;
using qt::SchemeParams;

namespace {

const qt::SafetensorsFile& golden_file(const std::string& name) {
  static std::map<std::string, qt::SafetensorsFile> files;
  auto it = files.find(name);
  if (it == files.end())
    it = files.emplace(name, qt::SafetensorsFile::open(qt::test::source_dir() + "/tests/golden/schemes/" + name)).first;
  return it->second;
}

struct Case {
  std::string label;  // test name suffix
  std::string file;
  SchemeParams params;
  std::string input, data, scales, biases, deq;  // golden keys (biases empty if none)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

const char* dt_name(DType t) { return t == DType::BF16 ? "bf16" : t == DType::F16 ? "f16" : "f32"; }

using qt::test::scheme_params;

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int bits : {2, 3, 4, 5, 6, 8})
      for (int g : {32, 64, 128}) {
        if (dt == DType::F16 && !(g == 64 && (bits == 3 || bits == 4 || bits == 8))) continue;
        std::string k = "b" + std::to_string(bits) + "g" + std::to_string(g) + "." + dt_name(dt);
        cases.push_back({"affine_" + k, "affine.safetensors", scheme_params("affine", bits, g, dt),
                         std::string("w.") + dt_name(dt), k + ".wq", k + ".scales", k + ".biases", k + ".deq"});
      }
  for (DType dt : {DType::F32, DType::BF16}) {
    for (int g : {0, 64, 128}) {
      std::string k = "int8.g" + std::to_string(g) + "." + dt_name(dt);
      cases.push_back({k, "int.safetensors", scheme_params("int8", 8, g, dt), std::string("w.") + dt_name(dt), k + ".q",
                       k + ".scale", "", k + ".deq"});
    }
    for (int g : {0, 128}) {
      std::string k = "int4.g" + std::to_string(g) + "." + dt_name(dt);
      cases.push_back({k, "int.safetensors", scheme_params("int4", 4, g, dt), std::string("w.") + dt_name(dt),
                       k + ".packed", k + ".scale", "", k + ".deq"});
    }
  }
  for (auto [dt, g] : {std::pair{DType::F32, 0}, {DType::BF16, 0}, {DType::BF16, 128}, {DType::F32, 64}}) {
    std::string k = "ct.g" + std::to_string(g) + "." + dt_name(dt);
    cases.push_back({"int8_" + k, "int.safetensors", scheme_params("int8_ct", 8, g, dt),
                     std::string("w.") + dt_name(dt), k + ".q", k + ".scale", "", k + ".deq"});
  }
  for (auto [dt, g] : {std::pair{DType::BF16, 128}, {DType::BF16, 32}, {DType::F32, 64}, {DType::F32, 128}}) {
    std::string k = "ct4.g" + std::to_string(g) + "." + dt_name(dt);
    cases.push_back({"int4_" + k, "ct4.safetensors", scheme_params("int4_ct", 4, g, dt),
                     std::string("w.") + dt_name(dt), k + ".packed", k + ".scale", "", k + ".deq"});
  }
  for (DType dt : {DType::F32, DType::BF16}) {  // compressed-tensors' FP8_DYNAMIC (float-quantized)
    std::string k = std::string("fp8.") + dt_name(dt);
    cases.push_back({std::string("fp8_") + dt_name(dt), "fp8.safetensors", scheme_params("fp8", 8, 0, dt),
                     std::string("w.") + dt_name(dt), k + ".weight", k + ".scale", "", k + ".deq"});
  }
  for (const char* qt : {"nf4", "fp4"})
    for (int bs : {64, 128})
      for (const char* in : {"main", "mainbf16", "ragged", "odd"}) {
        DType dt = std::string(in) == "mainbf16" ? DType::BF16 : DType::F32;
        std::string k = std::string(qt) + ".b" + std::to_string(bs) + "." + in;
        cases.push_back({std::string(qt) + "_b" + std::to_string(bs) + "_" + in, "bnb.safetensors",
                         scheme_params(qt, 4, bs, dt), std::string("in.") + in, k + ".packed", k + ".absmax", "",
                         k + ".deq"});
      }
  for (Case& c : cases)
    for (char& ch : c.label)
      if (ch == '.') ch = '_';
  return cases;
}

// Bytes equal, or the index of the first differing element (in units of the dtype).
void expect_same_tensor(const qt::Tensor& got, const qt::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype, want.dtype) << what << ": dtype " << qt::dtype_name(got.dtype) << " vs "
                                   << qt::dtype_name(want.dtype);
  ASSERT_EQ(got.shape, want.shape) << what;
  ASSERT_EQ(got.nbytes, want.nbytes) << what;
  if (std::memcmp(got.data, want.data, got.nbytes) == 0) return;
  size_t el = size_t(qt::dtype_bits(got.dtype)) / 8;
  for (size_t i = 0; i < got.nbytes; ++i)
    if (got.data[i] != want.data[i]) {
      std::string detail;
      if (got.dtype == DType::F32 || got.dtype == DType::BF16 || got.dtype == DType::F16) {
        auto g = qt::to_f32(got), w = qt::to_f32(want);
        detail = " (" + std::to_string(g[i / el]) + " vs " + std::to_string(w[i / el]) + ")";
      }
      ADD_FAILURE() << what << ": first difference at element " << i / el << " byte " << i << ": " << int(got.data[i])
                    << " vs " << int(want.data[i]) << detail;
      return;
    }
}

// Bit-for-bit equal; with zero_sign_free, +0 and −0 count as equal (bitsandbytes' own CPU paths
// disagree on the sign of FP4 code 8: its Python table and AVX-512 LUT hold +0, its scalar
// fallback LUT −0; we give +0, the value of the quant_map it writes).
void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                       bool zero_sign_free = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (zero_sign_free && got[i] == 0.0f && want[i] == 0.0f) continue;
    if (a != b && bad++ < 5) ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
  }
  EXPECT_EQ(bad, 0) << what << ": values differ";
}

// W as integer codes times fp32 scales, unrounded: what the int8-activation path multiplies.
std::vector<double> int_weights(const PackedTensor& p) {
  const int64_t N = p.rows, K = p.cols;
  const int64_t gl = p.params.group_size ? p.params.group_size : K, ng = K / gl;
  const std::vector<float> s = qt::to_f32(p.scales);
  std::vector<double> out(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      int q = p.params.scheme == "int4" ? ((p.data.data[n * (K / 2) + k / 2] >> (k % 2 ? 0 : 4)) & 15) - 8
                                        : p.data.as<int8_t>()[n * K + k];
      out[size_t(n * K + k)] = double(q) * s[size_t(n * ng + k / gl)];
    }
  return out;
}

class SchemeGolden : public ::testing::TestWithParam<Case> {};

TEST_P(SchemeGolden, QuantizeDequantizeBitExact) {
  const Case& c = GetParam();
  const qt::SafetensorsFile& f = golden_file(c.file);
  const qt::Tensor& in = f.get(c.input);
  ASSERT_EQ(in.shape.size(), 2u);
  const int64_t rows = in.shape[0], cols = in.shape[1];
  std::vector<float> w = qt::to_f32(in);

  PackedTensor p = qt::quantize_weights(w.data(), rows, cols, c.params, c.label);
  expect_same_tensor(p.data, f.get(c.data), c.label + " codes");
  expect_same_tensor(p.scales, f.get(c.scales), c.label + " scales");
  if (!c.biases.empty()) expect_same_tensor(p.biases, f.get(c.biases), c.label + " biases");

  std::vector<float> want = qt::to_f32(f.get(c.deq));
  const bool fp4 = c.params.scheme == "fp4";
  expect_bits_equal(qt::dequantize_weights(p), want, c.label + " dequantized", fp4);

  // Dequantizing the library's own packed tensors gives the library's values too.
  PackedTensor lib = p;
  lib.data = f.get(c.data);
  lib.scales = f.get(c.scales);
  if (!c.biases.empty()) lib.biases = f.get(c.biases);
  expect_bits_equal(qt::dequantize_weights(lib), want, c.label + " dequantized (library codes)", fp4);

  EXPECT_NEAR(p.bits_per_weight(), qt::scheme_bits_per_weight(c.params, rows, cols), 1e-12);
}

// Reference GEMM from the packed weights vs a plain fp32 GEMM over the dequantized weights.
TEST_P(SchemeGolden, ReferenceGemmMatchesDequantized) {
  const Case& c = GetParam();
  const qt::SafetensorsFile& f = golden_file(c.file);
  const qt::Tensor& in = f.get(c.input);
  const int64_t N = in.shape[0], K = in.shape[1], M = 3;
  std::vector<float> w = qt::to_f32(in);
  PackedTensor p = qt::quantize_weights(w.data(), N, K, c.params, c.label);
  std::vector<float> wd = qt::dequantize_weights(p);

  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K));
  for (float& v : x) v = nd(rng);
  for (int64_t k = 0; k < K; k += 17) x[size_t(K + k)] *= 30.0f;  // an outlier-heavy token

  // fp32 GEMM on the dequantized weights, and Σ|x||w| per output for the error bounds.
  std::vector<float> y_deq(static_cast<size_t>(M * N));
  std::vector<double> mag(static_cast<size_t>(M * N));
  for (int64_t t = 0; t < M; ++t)
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      double m = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        acc += x[size_t(t * K + k)] * wd[size_t(n * K + k)];
        m += std::abs(double(x[size_t(t * K + k)]) * wd[size_t(n * K + k)]);
      }
      y_deq[size_t(t * N + n)] = acc;
      mag[size_t(t * N + n)] = m;
    }

  std::vector<float> y(static_cast<size_t>(M * N));
  qt::reference_gemm(p, x.data(), M, y.data(), qt::ActMode::None);
  for (int64_t i = 0; i < M * N; ++i)
    ASSERT_NEAR(y[size_t(i)], y_deq[size_t(i)], 2e-6 * mag[size_t(i)] + 1e-30)
        << c.label << " weight-only, output " << i;

  if (!qt::find_scheme(c.params.scheme).int8_activations()) return;
  qt::reference_gemm(p, x.data(), M, y.data(), qt::ActMode::Int8PerToken);
  std::vector<int8_t> a(static_cast<size_t>(M * K));
  std::vector<float> sx(static_cast<size_t>(M));
  qt::quantize_activations_int8(x.data(), M, K, a.data(), sx.data());
  const std::vector<double> wi = int_weights(p);
  for (int64_t t = 0; t < M; ++t)
    for (int64_t n = 0; n < N; ++n) {
      const size_t i = size_t(t * N + n);
      double exact = 0.0, wabs = 0.0;  // the same product with a·s_x, in double
      for (int64_t k = 0; k < K; ++k) {
        exact += double(a[size_t(t * K + k)]) * sx[size_t(t)] * wi[size_t(n * K + k)];
        wabs += std::abs(wi[size_t(n * K + k)]);
      }
      ASSERT_NEAR(y[i], exact, 2e-6 * mag[i] + 1e-30) << c.label << " int8 path, output " << i;
      // Activation rounding moves each x by at most s_x/2; int8_ct in bf16 also rounds the
      // dequantized weights (the fp32 GEMM's operand) to bf16: 2^-9 relative each.
      const double wround = p.params.dtype == DType::F32 ? 2e-6 : 1.0 / 512;
      ASSERT_NEAR(y[i], y_deq[i], 0.5 * sx[size_t(t)] * wabs * 1.0001 + wround * mag[i])
          << c.label << " int8 path vs fp32, output " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Golden, SchemeGolden, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.label; });

TEST(Schemes, ActivationQuantizerMatchesGolden) {
  const qt::SafetensorsFile& f = golden_file("int.safetensors");
  const qt::Tensor& xt = f.get("act.x");
  const int64_t M = xt.shape[0], K = xt.shape[1];
  std::vector<float> x = qt::to_f32(xt);
  std::vector<int8_t> q(static_cast<size_t>(M * K));
  std::vector<float> s(static_cast<size_t>(M));
  qt::quantize_activations_int8(x.data(), M, K, q.data(), s.data());
  const qt::Tensor& wq = f.get("act.q");
  ASSERT_EQ(wq.nbytes, q.size());
  EXPECT_EQ(std::memcmp(q.data(), wq.data, q.size()), 0);
  expect_bits_equal(s, qt::to_f32(f.get("act.scale")), "activation scales");
  // Token 3 is k + 0.5 with s = 1: ties go to even.
  EXPECT_EQ(s[3], 1.0f);
  EXPECT_EQ(q[size_t(3 * K + 1)], int8_t(std::nearbyint(x[size_t(3 * K + 1)])));
}

TEST(Schemes, TableRowsAreConsistent) {
  std::vector<std::string> names;
  for (const qt::Scheme& s : qt::scheme_table()) {
    names.push_back(s.name);
    SchemeParams p = qt::default_params(s.name);
    std::string why;
    EXPECT_TRUE(qt::scheme_fits(p, 64, 256, &why)) << s.name << ": " << why;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"affine", "int8", "int8_ct", "int4", "int4_ct", "nf4", "fp4", "fp8",
                                             "fp8_block", "nvfp4", "nvfp4_a4", "mxfp4", "mxfp4_a4"}));
}

TEST(Schemes, BitsPerWeight) {
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("affine", 4, 64, DType::BF16), 7, 256), 4.5);
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("affine", 3, 32, DType::F16), 7, 256), 4.0);
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("affine", 8, 128, DType::F32), 7, 256), 8.5);
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("int8", 8, 0, DType::F32), 7, 256), 8.125);
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("int8", 8, 64, DType::BF16), 7, 256), 8.5);
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("int8_ct", 8, 0, DType::BF16), 7, 256), 8.0625);
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("int4", 4, 128, DType::F32), 7, 256), 4.25);
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("nf4", 4, 64, DType::F32), 8, 256), 4.5);
  // SmolLM2's 576-wide rows with bnb blocksize 128: 4.5 blocks per row, flat blocks.
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("fp4", 4, 128, DType::F32), 2, 576), 4.25);
  // NVFP4: an E4M3 byte per 16 and one fp32 global scale; MXFP4: an E8M0 byte per 32.
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("nvfp4", 4, 16, DType::BF16), 8, 256), 4.5 + 32.0 / 2048);
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("mxfp4", 4, 32, DType::BF16), 8, 256), 4.25);
  // FP8_BLOCK: a bf16 scale per 128×128 block (200 rows: two row blocks, the second padded).
  EXPECT_DOUBLE_EQ(qt::scheme_bits_per_weight(scheme_params("fp8_block", 8, 128, DType::BF16), 200, 256),
                   8.0 + 4 * 16.0 / (200 * 256));
}

// A UserError whose message contains every piece of `parts`.
void expect_user_error(const std::function<void()>& f, std::vector<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no UserError; expected one mentioning " << parts[0];
  } catch (const qt::UserError& e) {
    for (const std::string& s : parts) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

TEST(Schemes, BadParametersAreUserErrors) {
  std::vector<float> w(size_t(4 * 576), 0.5f);
  auto quant = [&](SchemeParams p, int64_t rows, int64_t cols) {
    return [=, &w] { qt::quantize_weights(w.data(), rows, cols, p, "blk.0.q_proj"); };
  };
  expect_user_error(quant(scheme_params("affine", 7, 64, DType::F32), 4, 256),
                    {"blk.0.q_proj", "7 bits", "2, 3, 4, 5, 6, 8"});
  expect_user_error(quant(scheme_params("affine", 4, 48, DType::F32), 4, 288), {"blk.0.q_proj", "group size 48"});
  expect_user_error(quant(scheme_params("affine", 4, 128, DType::F32), 4, 576), {"blk.0.q_proj", "128", "576"});
  expect_user_error(quant(scheme_params("int8", 8, 128, DType::F32), 4, 576), {"128", "576"});
  expect_user_error(quant(scheme_params("int8", 4, 0, DType::F32), 4, 256), {"4 bits"});
  expect_user_error(quant(scheme_params("int4", 4, 64, DType::F32), 4, 256), {"group size 64"});
  expect_user_error(quant(scheme_params("int4", 4, 0, DType::F32), 4, 255), {"odd"});
  expect_user_error(quant(scheme_params("nf4", 4, 48, DType::F32), 4, 256), {"group size 48"});
  expect_user_error(quant(scheme_params("fp4", 3, 64, DType::F32), 4, 256), {"3 bits"});
  expect_user_error(quant(scheme_params("affine", 4, 64, DType::I32), 4, 256), {"I32"});
  expect_user_error(quant(scheme_params("q4_k", 4, 64, DType::F32), 4, 256), {"q4_k", "affine"});
  expect_user_error([] { qt::find_scheme("nf5"); }, {"nf5", "known"});
  // bitsandbytes blocks run over the flattened tensor: 576-wide rows with blocksize 128 are fine.
  EXPECT_NO_THROW(quant(scheme_params("nf4", 4, 128, DType::F32), 4, 576)());

  std::string why;
  EXPECT_FALSE(qt::scheme_fits(scheme_params("affine", 4, 128, DType::F32), 30, 576, &why));
  EXPECT_NE(why.find("does not divide"), std::string::npos) << why;

  std::vector<float> bad(size_t(2 * 64), 1.0f);
  bad[70] = std::nanf("");
  expect_user_error([&] { qt::quantize_weights(bad.data(), 2, 64, scheme_params("affine", 4, 64, DType::F32), "t"); },
                    {"t:", "non-finite", "[1, 6]"});
}

TEST(Schemes, MalformedPackedTensorsAreUserErrors) {
  std::vector<float> w(static_cast<size_t>(4 * 128));
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 13) - 6.0f;
  PackedTensor p = qt::quantize_weights(w.data(), 4, 128, scheme_params("affine", 4, 64, DType::BF16));
  PackedTensor bad = p;
  bad.scales.shape = {4, 3};
  expect_user_error([&] { qt::dequantize_weights(bad, "model.layers.0.mlp.up_proj"); },
                    {"model.layers.0.mlp.up_proj", "scales"});
  bad = p;
  bad.biases = qt::Tensor();
  expect_user_error([&] { qt::dequantize_weights(bad, "x"); }, {"biases"});
  bad = p;
  bad.data.dtype = DType::I32;
  expect_user_error([&] { qt::dequantize_weights(bad, "x"); }, {"codes", "I32", "U32"});
}

// nf4/fp4 at every kernel level give the scalar level's bytes (the goldens above pin the level
// this CPU runs at; this pins the others), on values that stress the code choice: exactly on
// every midpoint (ties go to the lower code), ±1, signed zeros, a partial
// last block, at both block sizes.
TEST(Schemes, Bnb4CodesAreTheSameAtEveryKernelLevel) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const char* scheme : {"nf4", "fp4"})
    for (int bs : {64, 128}) {
      const int64_t rows = 3, cols = 4096 + 96;
      std::vector<float> w(size_t(rows * cols));
      for (float& v : w) v = nd(rng);
      // Each block: absmax 4 (a power of two, so x · (1/4) is exact), then every midpoint of the
      // sorted table times 4, ±1 after scaling, and both zeros.
      const float* tab =
          std::string(scheme) == "nf4" ? qt::schemes_detail::nf4_table() : qt::schemes_detail::fp4_table();
      std::vector<float> sorted(tab, tab + 16);
      std::sort(sorted.begin(), sorted.end());
      std::vector<float> special = {4.0f, -0.0f, 0.0f, -4.0f};
      for (int i = 0; i < 15; ++i) special.push_back(4.0f * ((sorted[size_t(i)] + sorted[size_t(i + 1)]) / 2.0f));
      for (int64_t b0 = 0; b0 + bs <= int64_t(w.size()); b0 += bs)
        for (size_t i = 0; i < special.size() && int64_t(i) < bs; ++i) w[size_t(b0) + i] = special[i];
      std::vector<std::vector<uint8_t>> got;
      for (qt::KernelLevel level : qt::available_kernel_levels()) {
        qt::set_kernel_level(level);
        PackedTensor t = qt::quantize_weights(w.data(), rows, cols, scheme_params(scheme, 4, bs, DType::F32));
        got.emplace_back(t.data.data, t.data.data + t.data.nbytes);
      }
      qt::set_kernel_level(qt::max_kernel_level());
      for (size_t l = 1; l < got.size(); ++l) EXPECT_EQ(got[l], got[0]) << scheme << " block " << bs << " level " << l;
    }
}

// int8_ct codes (compressed-tensors W8A8): the AVX2 intrinsics give the loop's bytes, for bf16
// and fp32 scales, per channel (with a tail of 4 past the last 32) and per group, on random
// weights, on ±127.5 (clamped) and on quotients that land on a .5 tie of rint after their
// rounding to T. (A quotient of two bf16 values is never itself a tie of the bf16 rounding: a/b
// with a and b of at most 8 significant bits is exact only with at most 8.)
TEST(Schemes, Int8CtCodesAreTheSameAtEveryKernelLevel) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 20.0f);
  for (DType T : {DType::BF16, DType::F32})
    for (int group : {0, 64}) {
      const int64_t rows = 4, cols = group ? 4096 + 64 : 4096 + 100;
      // Rows 1..3 have absmax 100 (a bf16 value), so s = T(100 / 127.5), whose mantissa is not
      // a power of two; the ties are searched among the bf16 values in (1, 100).
      const float amax = 100.0f, s = qt::schemes_detail::round_to(T, amax / 127.5f);
      std::vector<float> ties;
      for (uint32_t b = 0x3f80; b < 0x42c8; ++b) {
        const float v = qt::bf16_to_f32(uint16_t(b)), x = qt::schemes_detail::round_to(T, v / s);
        if (x - std::floor(x) == 0.5f) ties.insert(ties.end(), {v, -v});
      }
      if (T == DType::BF16) ASSERT_GE(ties.size(), 8u);
      ties.resize(std::min<size_t>(ties.size(), 60));
      std::vector<float> w(size_t(rows * cols));
      for (float& v : w) v = std::clamp(nd(rng), -99.0f, 99.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t at = 0; at + 64 <= cols; at += 64) {
          float* g = w.data() + r * cols + at;
          if (r == 0) {  // s = 1: ±127.5 round to ±128, then 127 and −128
            for (float v : {127.5f, -127.5f, 2.5f, -3.5f, 126.5f}) *g++ = v;
          } else {
            *g++ = amax;
            for (size_t i = 0; i < 63 && i < ties.size(); ++i)
              *g++ = ties[(i + size_t(r) + size_t(at / 64)) % ties.size()];
          }
        }
      std::vector<std::vector<uint8_t>> got;
      for (qt::KernelLevel level : qt::available_kernel_levels()) {
        qt::set_kernel_level(level);
        PackedTensor t = qt::quantize_weights(w.data(), rows, cols, scheme_params("int8_ct", 8, group, T));
        got.emplace_back(t.data.data, t.data.data + t.data.nbytes);
      }
      qt::set_kernel_level(qt::max_kernel_level());
      EXPECT_EQ(int8_t(got[0][0]), 127);
      EXPECT_EQ(int8_t(got[0][1]), -128);
      EXPECT_EQ(int8_t(got[0][2]), 2);
      EXPECT_EQ(int8_t(got[0][3]), -4);
      for (size_t l = 1; l < got.size(); ++l)
        EXPECT_EQ(got[l], got[0]) << dtype_name(T) << " group " << group << " level " << l;
    }
}

// quantize_tensor (convert's path: widened and quantized a chunk of rows at a time, in parallel)
// gives quantize_weights' bytes on the whole fp32 copy, for every scheme, from bf16 and f32
// sources, deferred too, over several chunks; nf4/fp4 with rows that do not hold whole blocks and
// an odd count (the partial block and the pad nibble fall in the last chunk).
TEST(Schemes, QuantizeTensorEqualsQuantizeWeights) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  struct Shape {
    int64_t rows, cols;
  };
  for (const char* scheme : {"affine", "int8", "int8_ct", "int4", "int4_ct", "nf4", "fp4", "fp8"})
    for (Shape sh : {Shape{301, 576}, Shape{1001, 129}})
      for (DType src : {DType::BF16, DType::F32}) {
        SchemeParams p = qt::default_params(scheme);
        p.dtype = src;
        if (!qt::scheme_fits(p, sh.rows, sh.cols)) continue;
        std::vector<float> w(size_t(sh.rows * sh.cols));
        for (float& v : w) v = nd(rng);
        qt::Tensor t = qt::Tensor::from_f32(w, {sh.rows, sh.cols});
        if (src == DType::BF16) {
          std::vector<uint8_t> b(w.size() * 2);
          for (size_t i = 0; i < w.size(); ++i) {
            const uint16_t h = qt::f32_to_bf16(w[i]);
            std::memcpy(&b[2 * i], &h, 2);
          }
          t = qt::Tensor::owned_bytes(DType::BF16, {sh.rows, sh.cols}, std::move(b));
        }
        const std::vector<float> wide = qt::to_f32(t);
        const PackedTensor want = qt::quantize_weights(wide.data(), sh.rows, sh.cols, p);
        const qt::Tensor deferred = qt::deferred_tensor(t.dtype, t.shape, [t] { return t; });
        for (const qt::Tensor& in : {t, deferred}) {
          const PackedTensor got = qt::quantize_tensor(in, p);
          const std::string what = std::string(scheme) + " " + std::to_string(sh.rows) + "x" + std::to_string(sh.cols) +
                                   " " + qt::dtype_name(src) + (in.deferred() ? " deferred" : "");
          expect_same_tensor(got.data, want.data, what + " codes");
          expect_same_tensor(got.scales, want.scales, what + " scales");
          if (want.biases.data) expect_same_tensor(got.biases, want.biases, what + " biases");
        }
      }
  // A non-finite weight far into the tensor is named by its row in the whole weight.
  std::vector<float> w(size_t(700 * 576), 0.01f);
  w[size_t(650 * 576 + 3)] = NAN;
  expect_user_error(
      [&] {
        qt::quantize_tensor(qt::Tensor::from_f32(w, {700, 576}), qt::default_params("affine"), "layer.w");
      },
      {"layer.w", "[650, 3]"});
}

}  // namespace
