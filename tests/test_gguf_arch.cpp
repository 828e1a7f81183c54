// Gemma 2, Gemma 3 and Phi-3 in GGUF: the files llama.cpp's convert_hf_to_gguf.py writes for the
// tiny models (tests/golden/make_gguf_arch_goldens.py) read to the HF folder's tensors and logits,
// and our writer gives the converter's tensors and keys (norms as 1 + w, Phi-3's fused qkv and
// gate_up, the SentencePiece vocabulary with its scores and types).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "tests/support.h"

namespace qt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string golden_gguf(const std::string& arch) {
  return test::source_dir() + "/tests/golden/gguf_arch/tiny-" + arch + ".bf16.gguf";
}
std::string tiny_dir(const std::string& arch) { return test::source_dir() + "/tests/golden/logits/tiny-" + arch; }

// The tiny folder as the golden script gave it to the converter (see its docstring): gemma2's
// query_pre_attn_scalar set to its head_dim, gemma3's layers all sliding.
std::string patched_folder(const std::string& arch) {
  const std::string d = test::temp_dir("gguf_arch_" + arch) + "/tiny-" + arch;
  fs::create_directories(d);
  fs::copy_file(tiny_dir(arch) + "/model.safetensors", d + "/model.safetensors");
  json c = test::read_json(tiny_dir(arch) + "/config.json");
  if (arch == "gemma2") c["query_pre_attn_scalar"] = c["head_dim"];
  if (arch == "gemma3") {
    c["layer_types"] = json::array();
    for (int i = 0; i < c["num_hidden_layers"].get<int>(); ++i) c["layer_types"].push_back("sliding_attention");
    c["sliding_window_pattern"] = 6;
    c.erase("_sliding_window_pattern");
  }
  std::ofstream(d + "/config.json") << c.dump(2);
  return d;
}

std::vector<int32_t> golden_ids(const std::string& arch) {
  return test::read_json(tiny_dir(arch) + "/logits.json")["ids"].get<std::vector<int32_t>>();
}

class GgufArch : public ::testing::TestWithParam<std::string> {};

// llama.cpp's file reads to the folder's model: the same configuration, the same tensors (Gemma's
// norms back from 1 + w, Phi-3's qkv / gate_up split), the same logits.
TEST_P(GgufArch, LlamaCppFileReadsToTheFolder) {
  const std::string arch = GetParam();
  const Checkpoint g = load_checkpoint(golden_gguf(arch)), h = load_checkpoint(patched_folder(arch));
  EXPECT_EQ(g.config.arch, h.config.arch);
  EXPECT_EQ(g.config.head_dim, h.config.head_dim);
  EXPECT_EQ(g.config.query_pre_attn_scalar, h.config.query_pre_attn_scalar);
  EXPECT_EQ(g.config.attn_softcap, h.config.attn_softcap);
  EXPECT_EQ(g.config.final_softcap, h.config.final_softcap);
  EXPECT_EQ(g.config.sliding, h.config.sliding);
  EXPECT_EQ(g.config.sliding_window, h.config.sliding_window);
  EXPECT_EQ(g.config.rope_theta, h.config.rope_theta);
  EXPECT_EQ(g.config.rope_local_theta, h.config.rope_local_theta);
  EXPECT_EQ(g.config.rope_scaling.type, h.config.rope_scaling.type);
  EXPECT_EQ(g.config.rope_scaling.factor, h.config.rope_scaling.factor);
  EXPECT_EQ(g.config.tie_word_embeddings, h.config.tie_word_embeddings);
  ASSERT_EQ(g.tensors.size(), h.tensors.size());
  for (auto& [name, t] : h.tensors) {
    ASSERT_TRUE(g.has(name)) << name;
    EXPECT_EQ(to_f32(materialize(g.get(name))), to_f32(materialize(t))) << name;
  }
  const std::vector<int32_t> ids = golden_ids(arch);
  const int n = int(ids.size());
  EXPECT_EQ(test::max_abs_diff(test::fp32_logits(g, ids, n), test::fp32_logits(h, ids, n)), 0.0);
  // Phi-3 needs no patch: the file is the folder's model, which transformers ran for logits.json.
  if (arch == "phi3") {
    const std::vector<float> want =
        test::read_json(tiny_dir(arch) + "/logits.json")["logits"].get<std::vector<float>>();
    EXPECT_LT(test::max_abs_diff(test::fp32_logits(g, ids, n), want), 1e-4);
  }
}

// Ours from the folder: the converter's tensors (names, shapes, types, bytes) and its values for
// every architecture key it writes, nothing more for these configurations.
TEST_P(GgufArch, WriterGivesTheConvertersFile) {
  const std::string arch = GetParam(), dir = test::temp_dir("gguf_arch_w_" + arch);
  std::string out;
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + patched_folder(arch) + " --out " + dir +
                              "/ours.gguf --format gguf --gguf-type bf16",
                          &out),
            0)
      << out;
  const GgufFile ours = GgufFile::open(dir + "/ours.gguf"), ref = GgufFile::open(golden_gguf(arch));
  ASSERT_EQ(ours.tensors().size(), ref.tensors().size());
  for (const GgufTensorInfo& r : ref.tensors()) {
    const GgufTensorInfo* o = ours.find_tensor(r.name);
    ASSERT_NE(o, nullptr) << r.name;
    EXPECT_EQ(o->ne, r.ne) << r.name;
    EXPECT_EQ(o->type, r.type) << r.name;
    ASSERT_EQ(o->nbytes, r.nbytes) << r.name;
    EXPECT_EQ(std::memcmp(o->data, r.data, r.nbytes), 0) << r.name;
  }
  const std::string a = ref.get_string("general.architecture");
  EXPECT_EQ(ours.get_string("general.architecture"), a);
  for (auto& [k, v] : ref.metadata()) {
    if (k.rfind(a + ".", 0) != 0 && k != "general.file_type") continue;
    ASSERT_TRUE(ours.has(k)) << k;
    const GgufValue& o = ours.metadata().at(k);
    EXPECT_EQ(o.type, v.type) << k;
    EXPECT_EQ(o.i, v.i) << k;
    EXPECT_EQ(o.f, v.f) << k;
    EXPECT_EQ(o.s, v.s) << k;
  }
  for (auto& [k, v] : ours.metadata())
    if (k.rfind(a + ".", 0) == 0) EXPECT_TRUE(ref.has(k)) << "extra key " << k;
}

// GGUF to GGUF: the SentencePiece vocabulary (tokens, scores, types, special ids, add_space_prefix)
// and every tensor come through unchanged.
TEST_P(GgufArch, GgufToGgufKeepsTheVocabulary) {
  const std::string arch = GetParam(), dir = test::temp_dir("gguf_arch_rt_" + arch);
  std::string out;
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + golden_gguf(arch) + " --out " + dir +
                              "/ours.gguf --format gguf --gguf-type bf16",
                          &out),
            0)
      << out;
  const GgufFile ours = GgufFile::open(dir + "/ours.gguf"), ref = GgufFile::open(golden_gguf(arch));
  for (auto& [k, v] : ref.metadata()) {
    if (k.rfind("tokenizer.", 0) != 0) continue;
    ASSERT_TRUE(ours.has(k)) << k;
    const GgufValue& o = ours.metadata().at(k);
    EXPECT_EQ(o.i, v.i) << k;
    EXPECT_EQ(o.s, v.s) << k;
    EXPECT_EQ(o.as, v.as) << k;
    EXPECT_EQ(o.af, v.af) << k;
    EXPECT_EQ(o.ai, v.ai) << k;
  }
  for (const GgufTensorInfo& r : ref.tensors()) {
    const GgufTensorInfo* o = ours.find_tensor(r.name);
    ASSERT_NE(o, nullptr) << r.name;
    ASSERT_EQ(o->nbytes, r.nbytes) << r.name;
    EXPECT_EQ(std::memcmp(o->data, r.data, r.nbytes), 0) << r.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, GgufArch, ::testing::Values("gemma2", "gemma3", "phi3"));

// A Gemma 2 whose query_pre_attn_scalar llama.cpp would not derive is refused, not written wrong;
// a Gemma 3 whose sliding layers are not llama.cpp's default period keeps them in
// attention.sliding_window_pattern and reads back to transformers' logits.
TEST(GgufArchEdges, GemmaFactsLlamaCppCannotDeriveAreKept) {
  const std::string dir = test::temp_dir("gguf_arch_edges"), bin = test::quanttool_bin();
  std::string out;
  EXPECT_EQ(test::run_cmd(bin + " convert --in " + tiny_dir("gemma2") + " --out " + dir +
                              "/g2.gguf --format gguf --gguf-type f32",
                          &out),
            2)
      << out;
  EXPECT_NE(out.find("query_pre_attn_scalar"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  ASSERT_EQ(test::run_cmd(bin + " convert --in " + tiny_dir("gemma3") + " --out " + dir +
                              "/g3.gguf --format gguf --gguf-type f32",
                          &out),
            0)
      << out;
  const GgufFile f = GgufFile::open(dir + "/g3.gguf");
  EXPECT_EQ(f.get_int_array("gemma3.attention.sliding_window_pattern"), (std::vector<int64_t>{1, 1, 0}));
  const Checkpoint g = load_checkpoint(dir + "/g3.gguf");
  EXPECT_EQ(g.config.sliding, (std::vector<uint8_t>{1, 1, 0}));
  const json gold = test::read_json(tiny_dir("gemma3") + "/logits.json");
  const auto ids = gold["ids"].get<std::vector<int32_t>>();
  EXPECT_LT(test::max_abs_diff(test::fp32_logits(g, ids, int(ids.size())), gold["logits"].get<std::vector<float>>()),
            1e-4);
}

}  // namespace
}  // namespace qt
