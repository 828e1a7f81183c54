// Mixture-of-experts GGUFs against llama.cpp's own tools (tests/golden/make_moe_gguf_goldens.py:
// tiny random qwen3_moe (4 experts) and mixtral (8 experts) folders, convert_hf_to_gguf.py's bf16
// GGUF of each, and llama-quantize's Q8_0 / Q4_K_M / Q2_K / Q3_K_L files of that GGUF):
//  - `convert --format gguf --gguf-type bf16` of the folder gives the converter's file: the same
//    architecture keys (qwen3moe.expert_*, mixtral as "llama" with llama.expert_*) and the same
//    tensors (ffn_{gate,up,down}_exps stacked [n_expert, rows, cols], ffn_gate_inp in F32; names,
//    shapes, types, bytes);
//  - `convert --gguf-type q8_0|q4_k_m|q2_k_mix|q3_k_l` of the converter's GGUF gives llama-quantize's
//    tensors, byte for byte: its per-tensor MoE rules (8 experts: attn_v / attn_k Q8_0, attn_output
//    Q5_K for Q4_K_M and Q2_K but not Q3_K_L; ffn_down_exps by the layer in its name) and fallbacks;
//  - reading those GGUFs: the config (experts, top-k, expert width) and our logits equal our logits
//    of the folder (bf16: the same values; Q8_0 within its rounding);
//  - refused with one line: a qwen3_moe llama.cpp would run differently (a dense layer,
//    norm_topk_prob false), --imatrix on a mixture of experts.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "libquant/model/llama.h"
#include "tests/gguf_compare.h"
#include "tests/support.h"

namespace qt {
namespace {

std::string golden(const std::string& name) { return test::source_dir() + "/tests/golden/gguf_moe/" + name; }

int qt_run(const std::string& args, std::string* out) { return test::run_cmd(test::quanttool_bin() + " " + args, out); }

class MoeGguf : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeGguf, WritesWhatConvertHfToGgufWrites) {
  const std::string name = GetParam(), out = test::temp_dir("gguf_moe_w_" + name) + "/bf16.gguf";
  std::string log;
  ASSERT_EQ(
      qt_run("convert --in " + golden("tiny-" + name) + " --out " + out + " --format gguf --gguf-type bf16", &log), 0)
      << log;
  GgufFile got = GgufFile::open(out), want = GgufFile::open(golden("tiny-" + name + ".bf16.gguf"));
  test::expect_same_arch_keys(got, want, name);
  test::expect_same_tensors(got, want, name);
}

TEST_P(MoeGguf, QuantizedEqualsLlamaQuantize) {
  const std::string name = GetParam(), tmp = test::temp_dir("gguf_moe_q_" + name);
  const std::vector<std::pair<std::string, std::string>> cases =
      name == "mixtral8" ? std::vector<std::pair<std::string, std::string>>{{"q8_0", "q8_0"},
                                                                            {"q4_k_m", "q4_k_m"},
                                                                            {"q2_k_mix", "q2_k"},
                                                                            {"q3_k_l", "q3_k_l"}}
                         : std::vector<std::pair<std::string, std::string>>{{"q8_0", "q8_0"}, {"q4_k_m", "q4_k_m"}};
  for (auto& [type, file] : cases) {
    const std::string out = tmp + "/" + type + ".gguf";
    std::string log;
    ASSERT_EQ(qt_run("convert --in " + golden("tiny-" + name + ".bf16.gguf") + " --out " + out +
                         " --format gguf --gguf-type " + type,
                     &log),
              0)
        << log;
    GgufFile got = GgufFile::open(out), want = GgufFile::open(golden("tiny-" + name + "." + file + ".gguf"));
    test::expect_same_tensors(got, want, name + " " + type);
    EXPECT_EQ(got.metadata().at("general.file_type").i, want.metadata().at("general.file_type").i) << type;
  }
  if (name == "mixtral8") {  // the 8-expert rules, visible in the golden itself
    GgufFile q4 = GgufFile::open(golden("tiny-mixtral8.q4_k_m.gguf")),
             q3 = GgufFile::open(golden("tiny-mixtral8.q3_k_l.gguf"));
    EXPECT_EQ(int(q4.find_tensor("blk.0.attn_k.weight")->type), int(GgmlType::Q8_0));
    EXPECT_EQ(int(q4.find_tensor("blk.0.attn_output.weight")->type), int(GgmlType::Q5_1));    // Q5_K's fallback
    EXPECT_EQ(int(q3.find_tensor("blk.0.attn_output.weight")->type), int(GgmlType::Q4_0));    // Q3_K's fallback
    EXPECT_EQ(int(q4.find_tensor("blk.1.ffn_down_exps.weight")->type), int(GgmlType::Q8_0));  // Q6_K's
    EXPECT_EQ(int(q4.find_tensor("blk.0.ffn_gate_inp.weight")->type), int(GgmlType::F32));
  }
}

TEST_P(MoeGguf, ReadsToTheFolderLogits) {
  const std::string name = GetParam();
  Checkpoint hf = load_checkpoint(golden("tiny-" + name));
  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(int32_t((i * 37 + 11) % hf.config.vocab));
  const std::vector<float> want = test::fp32_logits(hf, ids, int(ids.size()));
  double scale = 0;
  for (float x : want) scale = std::max(scale, double(std::fabs(x)));
  for (const char* type : {"bf16", "q8_0"}) {
    SCOPED_TRACE(type);
    Checkpoint g = load_checkpoint(golden("tiny-" + name + "." + type + ".gguf"));
    EXPECT_EQ(g.config.arch, hf.config.arch);
    EXPECT_EQ(g.config.n_experts, hf.config.n_experts);
    EXPECT_EQ(g.config.n_experts_per_tok, hf.config.n_experts_per_tok);
    EXPECT_EQ(g.config.moe_intermediate, hf.config.moe_intermediate);
    EXPECT_TRUE(g.config.norm_topk_prob);
    ASSERT_EQ(g.tensors.size(), hf.tensors.size());
    if (std::string(type) == "bf16") {  // the same values: the same logits
      const double d = test::max_abs_diff(test::fp32_logits(g, ids, int(ids.size())), want);
      std::printf("%s: max |logit diff| GGUF vs folder %.3g (logits up to %.3g)\n", name.c_str(), d, scale);
      EXPECT_LT(d, 1e-4);
      continue;
    }
    // Q8_0: each expert's slice is its own weight, within a Q8_0 step (absmax / 127; its scale is f16).
    for (auto& [hf_name, t] : hf.tensors) {
      const std::vector<float> a = to_f32(g.get(hf_name)), b = to_f32(t);
      float amax = 0;
      for (float x : b) amax = std::max(amax, std::fabs(x));
      EXPECT_LE(test::max_abs_diff(a, b), amax / 127.0) << hf_name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, MoeGguf, ::testing::Values("qwen3moe", "mixtral8"));

TEST(MoeGgufRefusals, OneLineExit2) {
  const std::string tmp = test::temp_dir("gguf_moe_refused");
  const std::string qwen_dense = test::source_dir() + "/tests/golden/logits/tiny-qwen3-moe";  // layer 1 dense
  const std::pair<std::string, std::string> cases[] = {
      {"--in " + qwen_dense + " --gguf-type f16", "dense MLP"},
      {"--in " + golden("tiny-mixtral8") + " --target-bpw 4.5 --target-loss weighted-error --imatrix " +
           test::source_dir() + "/tests/golden/imatrix/tiny-spm.imatrix.dat",
       "mixture-of-experts"},
  };
  for (auto& [args, what] : cases) {
    std::string log;
    EXPECT_EQ(qt_run("convert " + args + " --out " + tmp + "/x.gguf --format gguf", &log), 2) << log;
    EXPECT_NE(log.find("error:"), std::string::npos) << log;
    EXPECT_NE(log.find(what), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace qt
