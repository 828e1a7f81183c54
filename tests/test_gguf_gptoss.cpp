// gpt-oss and MXFP4 in GGUF against llama.cpp's own tools (tests/golden/make_gpt_oss_gguf_goldens.py:
// convert_hf_to_gguf.py's bf16 GGUF of the tiny gpt_oss folders of make_gpt_oss_golden.py, the bf16
// one and the one whose experts are MXFP4 as released, and llama-quantize's MXFP4_MOE file of the
// first):
//  - MXFP4 blocks: ggml's reference rule (quantize_row_mxfp4_ref) and its dequantization; the
//    weighted rule never worse under its importances;
//  - `convert --format gguf --gguf-type bf16` of each folder gives the converter's file: the same
//    gpt-oss.* keys, tensors (names, shapes, types, bytes): experts stacked and split out of the
//    interleaved gate_up_proj with their biases, sinks as attn_sinks.weight, the MXFP4 experts'
//    blocks copied, file type MOSTLY_MXFP4_MOE;
//  - `--gguf-type mxfp4_moe` of the converter's bf16 file gives llama-quantize's bytes (experts
//    MXFP4, every other weight Q8_0), as of the tiny qwen3moe and Mixtral files of test_gguf_moe
//    and of the converter's MXFP4 file (experts copied); `mxfp4` gives `--pure`'s;
//  - reading those GGUFs gives the folder's model: logits equal ours of the folder with YaRN's
//    truncate set (llama.cpp always truncates), the MXFP4 path without loss.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "formats/checkpoint.h"
#include "formats/ggml_blocks.h"
#include "formats/ggml_quantize.h"
#include "formats/gguf.h"
#include "libquant/model/llama.h"
#include "tests/gguf_compare.h"
#include "tests/support.h"

namespace qt {
namespace {

std::string golden(const std::string& name) { return test::source_dir() + "/tests/golden/gguf_gptoss/" + name; }
std::string folder(const std::string& name) { return test::tiny_dir(name); }

int qt_run(const std::string& args, std::string* out) { return test::run_cmd(test::quanttool_bin() + " " + args, out); }

// The folder with YaRN's truncate true: the model llama.cpp runs from its GGUF.
std::string truncated_copy(const std::string& name) {
  const std::string dir = test::temp_dir("gptoss_trunc_" + name) + "/" + name;
  std::filesystem::copy(folder(name), dir);
  nlohmann::json cfg = test::read_json(dir + "/config.json");
  cfg["rope_parameters"]["truncate"] = true;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  return dir;
}

TEST(Mxfp4Blocks, ReferenceRuleAndWeighted) {
  const GgmlTypeRow& row = *ggml_type_row(39);
  ASSERT_TRUE(row.to_float && row.from_float && row.from_float_imatrix);
  EXPECT_EQ(row.block_size, 32);
  EXPECT_EQ(row.type_size, 17);
  // Exact values come back: 2^k times the E2M1 grid, the largest magnitude in [4, 8) · 2^(k-2)
  std::vector<float> x(32);
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int j = 0; j < 32; ++j) x[size_t(j)] = (j % 2 ? -1.0f : 1.0f) * grid[j % 8] * 0.25f;
  uint8_t b[17];
  row.from_float(x.data(), b, 1);
  EXPECT_EQ(b[0], 127 - 2 + 0);  // amax 1.5 -> floor(log2) = 0 -> e = 125
  std::vector<float> y(32);
  row.to_float(b, y.data(), 1);
  EXPECT_EQ(y, x);
  // A zero block: exponent byte 0, values 0 (ggml's e8m0 half of 0 is 2^-128, a denormal).
  std::vector<float> z(32, 0.0f);
  row.from_float(z.data(), b, 1);
  EXPECT_EQ(b[0], 0);
  row.to_float(b, y.data(), 1);
  EXPECT_EQ(y, z);
  // ggml's quantize_row_mxfp4_ref as written there (a scan of the 16 codes): the same bytes on
  // random blocks and on blocks of exact midpoints, signed zeros and tiny values.
  auto ggml_ref = [](const float* v, uint8_t* out) {
    static const int8_t k[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
    const uint8_t e = amax > 0.0f ? uint8_t(std::floor(std::log2(amax)) - 2 + 127) : 0;
    const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
    float d;
    std::memcpy(&d, &bits, 4);
    auto best = [&](float xv) {
      int bi = 0;
      float be = std::fabs(k[0] * d - xv);
      for (int i = 1; i < 16; ++i)
        if (std::fabs(k[i] * d - xv) < be) bi = i, be = std::fabs(k[i] * d - xv);
      return bi;
    };
    out[0] = e;
    for (int j = 0; j < 16; ++j) out[1 + j] = uint8_t(best(v[j]) | (best(v[j + 16]) << 4));
  };
  std::mt19937 rng0(11);
  std::uniform_int_distribution<int> pick(0, 15);
  for (int t = 0; t < 20000; ++t) {
    std::vector<float> v(32);
    const float scale = std::ldexp(1.0f, t % 40 - 20);
    for (int j = 0; j < 32; ++j) {
      const int a = pick(rng0), c = pick(rng0);  // a grid point, a midpoint, or noise
      const float mid = 0.5f * (grid[a % 8] + grid[std::min(7, a % 8 + 1)]);
      v[size_t(j)] = (c < 5 ? mid : c < 10 ? grid[a % 8] : float(rng0() % 1000) / 100.0f) * (a >= 8 ? -scale : scale);
      if (c == 15) v[size_t(j)] = a % 2 ? -0.0f : 0.0f;
    }
    uint8_t want[17], got[17];
    ggml_ref(v.data(), want);
    row.from_float(v.data(), got, 1);
    ASSERT_EQ(std::memcmp(want, got, 17), 0) << t;
  }
  // Random blocks: the weighted rule never worse under its weights.
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.01f, 4.0f);
  int better = 0;
  for (int t = 0; t < 2000; ++t) {
    std::vector<float> v(32), w(32), a(32), c(32);
    for (int j = 0; j < 32; ++j) v[size_t(j)] = nd(rng) * (t % 5 == 0 ? 30.0f : 0.01f), w[size_t(j)] = ud(rng);
    uint8_t r[17], q[17];
    row.from_float(v.data(), r, 1);
    row.from_float_imatrix(v.data(), w.data(), q, 1);
    row.to_float(r, a.data(), 1);
    row.to_float(q, c.data(), 1);
    double er = 0, eq = 0;
    for (int j = 0; j < 32; ++j) {
      er += w[size_t(j)] * double(a[size_t(j)] - v[size_t(j)]) * (a[size_t(j)] - v[size_t(j)]);
      eq += w[size_t(j)] * double(c[size_t(j)] - v[size_t(j)]) * (c[size_t(j)] - v[size_t(j)]);
    }
    EXPECT_LE(eq, er * (1 + 1e-6));
    better += eq < er * (1 - 1e-6);
  }
  EXPECT_GT(better, 0);  // the other exponents do win somewhere
  // Calibrated rounding's codes 0..14 are the E2M1 values in rising order under the block's scale.
  const GgmlCodeRange cr = ggml_code_range(GgmlType::MXFP4);
  ASSERT_EQ(cr.hi - cr.lo + 1, 15);
  row.from_float(x.data(), b, 1);
  float last = -INFINITY;
  for (int c = cr.lo; c <= cr.hi; ++c) {
    std::vector<uint8_t> L(32, uint8_t(c));
    ggml_pack_codes(GgmlType::MXFP4, L.data(), b);
    row.to_float(b, y.data(), 1);
    EXPECT_GT(y[0], last) << c;
    EXPECT_EQ(y[31], y[0]);
    last = y[0];
  }
  EXPECT_EQ(last, 6.0f * 0.25f);
}

// --imatrix and --gptq reach MXFP4 experts (llama-quantize's MXFP4 ignores an imatrix): every
// expert's slice with its own importances, GPTQ's codes on the MXFP4 grid decoding close to the
// weights.
TEST(Mxfp4Blocks, ImatrixAndGptqOnExperts) {
  const std::string text = test::data_file("wikitext-2/wiki.valid.tokens.txt");
  QT_REQUIRE_FILE(text);
  const std::string g = test::source_dir() + "/tests/golden/imatrix/", dir = test::temp_dir("mxfp4_calib");
  const std::string base = "convert --in " + g + "tiny-spm-moe.gguf --format gguf --gguf-type mxfp4_moe --imatrix " +
                           g + "tiny-spm-moe.imatrix.gguf --out " + dir;
  std::string out;
  ASSERT_EQ(qt_run(base + "/i.gguf", &out), 0) << out;
  EXPECT_NE(out.find("imatrix: 33 weights quantized with importance weights"), std::string::npos) << out;
  ASSERT_EQ(qt_run(base + "/g.gguf --gptq --calib " + text + " --calib-chunks 4", &out), 0) << out;
  EXPECT_NE(out.find("gptq: 33 weights"), std::string::npos) << out;
  const GgufFile i = GgufFile::open(dir + "/i.gguf"), q = GgufFile::open(dir + "/g.gguf");
  const GgufTensorInfo *ti = i.find_tensor("blk.1.ffn_down_exps.weight"),
                       *tq = q.find_tensor("blk.1.ffn_down_exps.weight");
  ASSERT_TRUE(ti && tq);
  ASSERT_EQ(tq->type, GgmlType::MXFP4);
  EXPECT_NE(std::memcmp(ti->data, tq->data, ti->nbytes), 0);
  Checkpoint ck = load_checkpoint(g + "tiny-spm-moe.gguf", LoadMode::Deferred);
  const std::vector<std::string> parts = gguf_expert_parts("blk.1.ffn_down_exps.weight", ck.config);
  const std::vector<float> w0 = to_f32(materialize(ck.tensors.at(parts[0])));
  std::vector<float> d0(w0.size());
  ggml_dequantize(*ggml_type_row(39), tq->data, d0.data(), w0.size() / 32);
  double err = 0, ref = 0;
  for (size_t k = 0; k < w0.size(); ++k) err += (d0[k] - w0[k]) * (d0[k] - w0[k]), ref += w0[k] * w0[k];
  EXPECT_LT(err / ref, 0.05);
}

class GptOssGguf : public ::testing::TestWithParam<std::string> {};

TEST_P(GptOssGguf, WritesWhatConvertHfToGgufWrites) {
  const std::string name = GetParam(), out = test::temp_dir("gptoss_w_" + name) + "/bf16.gguf";
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + folder(name) + " --out " + out + " --format gguf --gguf-type bf16", &log), 0)
      << log;
  GgufFile got = GgufFile::open(out), want = GgufFile::open(golden("tiny-" + name + ".bf16.gguf"));
  test::expect_same_arch_keys(got, want, name);
  test::expect_same_tensors(got, want, name);
}

TEST_P(GptOssGguf, ReadsToTheFolderLogits) {
  const std::string name = GetParam();
  Checkpoint hf = load_checkpoint(truncated_copy(name));
  Checkpoint g = load_checkpoint(golden("tiny-" + name + ".bf16.gguf"));
  EXPECT_EQ(g.config.arch, "gpt_oss");
  EXPECT_EQ(g.config.n_experts, 4);
  EXPECT_EQ(g.config.n_experts_per_tok, 2);
  EXPECT_EQ(g.config.moe_intermediate, 64);
  EXPECT_EQ(g.config.sliding, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(g.config.sliding_window, 8);
  EXPECT_EQ(g.config.rope_scaling.type, "yarn");
  EXPECT_TRUE(g.config.rope_scaling.truncate);
  EXPECT_EQ(g.config.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_FLOAT_EQ(g.config.swiglu_limit, 7.0f);
  ASSERT_EQ(g.tensors.size(), hf.tensors.size());
  for (auto& [n, t] : hf.tensors) EXPECT_EQ(to_f32(g.get(n)), to_f32(t)) << n;  // bf16 / MXFP4 both exact
  const test::TinyGolden gold = test::tiny_golden(name);
  const double d = test::max_abs_diff(test::fp32_logits(g, gold.ids, int(gold.ids.size())),
                                      test::fp32_logits(hf, gold.ids, int(gold.ids.size())));
  std::printf("tiny-%s: max |logit diff| GGUF vs folder (truncate true) %.3g\n", name.c_str(), d);
  EXPECT_LT(d, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Tiny, GptOssGguf, ::testing::Values("gpt-oss", "gpt-oss-mxfp4"));

// llama-quantize's MXFP4_MOE of the converter's bf16 file, byte for byte; the MXFP4 folder's own
// blocks go through unchanged (the converter's MXFP4 experts), the rest Q8_0.
TEST(GptOssGgufMxfp4Moe, EqualsLlamaQuantize) {
  const std::string tmp = test::temp_dir("gptoss_mxfp4_moe");
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + golden("tiny-gpt-oss.bf16.gguf") + " --out " + tmp +
                       "/a.gguf --format gguf --gguf-type mxfp4_moe",
                   &log),
            0)
      << log;
  GgufFile got = GgufFile::open(tmp + "/a.gguf"), want = GgufFile::open(golden("tiny-gpt-oss.mxfp4_moe.gguf"));
  test::expect_same_tensors(got, want, "mxfp4_moe");
  EXPECT_EQ(got.metadata().at("general.file_type").i, 38);
  EXPECT_EQ(int(want.find_tensor("output.weight")->type), int(GgmlType::Q8_0));
  EXPECT_EQ(int(want.find_tensor("blk.0.ffn_up_exps.weight")->type), int(GgmlType::MXFP4));
  // --gguf-type mxfp4: every weight MXFP4, as llama-quantize --pure MXFP4_MOE.
  ASSERT_EQ(qt_run("convert --in " + golden("tiny-gpt-oss.bf16.gguf") + " --out " + tmp +
                       "/p.gguf --format gguf --gguf-type mxfp4",
                   &log),
            0)
      << log;
  test::expect_same_tensors(GgufFile::open(tmp + "/p.gguf"), GgufFile::open(golden("tiny-gpt-oss.mxfp4_pure.gguf")),
                            "mxfp4 pure");

  ASSERT_EQ(qt_run("convert --in " + folder("gpt-oss-mxfp4") + " --out " + tmp +
                       "/b.gguf --format gguf --gguf-type mxfp4_moe",
                   &log),
            0)
      << log;
  // From the converter's GGUF of that folder: llama-quantize's bytes (it copies the MXFP4 experts;
  // requantizing would give the same values, not always the same exponent bytes).
  ASSERT_EQ(qt_run("convert --in " + golden("tiny-gpt-oss-mxfp4.bf16.gguf") + " --out " + tmp +
                       "/c.gguf --format gguf --gguf-type mxfp4_moe",
                   &log),
            0)
      << log;
  test::expect_same_tensors(GgufFile::open(tmp + "/c.gguf"),
                            GgufFile::open(golden("tiny-gpt-oss-mxfp4.mxfp4_moe.gguf")), "mxfp4 gguf -> mxfp4_moe");
  GgufFile b = GgufFile::open(tmp + "/b.gguf"), conv = GgufFile::open(golden("tiny-gpt-oss-mxfp4.bf16.gguf"));
  for (auto& t : b.tensors()) {
    const GgufTensorInfo* c = conv.find_tensor(t.name);
    ASSERT_TRUE(c) << t.name;
    if (c->type == GgmlType::MXFP4) {
      ASSERT_EQ(t.nbytes, c->nbytes);
      EXPECT_EQ(std::memcmp(t.data, c->data, t.nbytes), 0) << t.name;
    } else if (t.ne.size() >= 2 && t.name.find("ffn_gate_inp") == std::string::npos &&
               t.name.find(".bias") == std::string::npos) {
      EXPECT_EQ(int(t.type), int(GgmlType::Q8_0)) << t.name;
    }
  }
}

// The mix on the other mixtures of experts, as llama-quantize allows it for any architecture: its bytes.
TEST(GptOssGgufMxfp4Moe, OtherMoeArchitectures) {
  const std::string tmp = test::temp_dir("gptoss_mxfp4_other");
  for (const char* name : {"qwen3moe", "mixtral8"}) {
    std::string log;
    const std::string out = tmp + "/" + name + ".gguf";
    ASSERT_EQ(qt_run("convert --in " + test::source_dir() + "/tests/golden/gguf_moe/tiny-" + name +
                         ".bf16.gguf --out " + out + " --format gguf --gguf-type mxfp4_moe",
                     &log),
              0)
        << log;
    GgufFile got = GgufFile::open(out), want = GgufFile::open(golden("tiny-" + std::string(name) + ".mxfp4_moe.gguf"));
    test::expect_same_tensors(got, want, name);
    EXPECT_EQ(int(want.find_tensor("blk.0.ffn_down_exps.weight")->type), int(GgmlType::MXFP4));
    EXPECT_EQ(got.metadata().at("general.file_type").i, 38);
  }
}

TEST(GptOssGgufRefusals, OneLineExit2) {
  const std::string tmp = test::temp_dir("gptoss_refused"), src = tmp + "/src";
  std::filesystem::copy(folder("gpt-oss"), src);
  nlohmann::json cfg = test::read_json(src + "/config.json");
  cfg["swiglu_limit"] = 5.0;
  std::ofstream(src + "/config.json") << cfg.dump(2);
  std::string log;
  EXPECT_EQ(qt_run("convert --in " + src + " --out " + tmp + "/x.gguf --format gguf --gguf-type f16", &log), 2) << log;
  EXPECT_NE(log.find("error:"), std::string::npos) << log;
  EXPECT_NE(log.find("swiglu"), std::string::npos) << log;
}

}  // namespace
}  // namespace qt
