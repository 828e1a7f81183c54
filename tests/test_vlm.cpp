// Vision-language folders (formats/vlm.h): tiny random Qwen2.5-VL, Qwen3-VL and Gemma 3 multimodal models
// made by transformers (tests/golden/make_vlm_goldens.py). The language model read as its text
// architecture gives transformers' VLM logits on text; convert keeps every vision / projector
// tensor byte for byte, the VLM's config and the processor files; what transformers makes of our
// compressed-tensors W4A16 output (recorded by the script) is what our engine makes of it.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "libquant/model/llama.h"
#include "tests/support.h"

namespace qt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string tiny(const std::string& name) { return test::source_dir() + "/tests/golden/vlm/tiny-" + name; }

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Our logits on the golden's tokens through the checkpoint's own linears (float or quantized).
std::vector<float> our_logits(const Checkpoint& ck, const std::vector<int32_t>& ids) {
  PackedLinearOptions lo;
  LlamaModel m(ck, checkpoint_linear_factory(ck, lo));
  const int n = int(ids.size());
  auto cache = m.make_cache(n, "f32");
  std::vector<float> out(size_t(n) * size_t(ck.config.vocab));
  m.forward(ids.data(), n, 0, *cache, 0, n, out.data());
  return out;
}

// Every tensor of `in` that `keep` accepts is in `out` with the same dtype, shape and bytes.
int expect_same_tensors(const std::string& in, const std::string& out, bool (*keep)(const std::string&)) {
  const SafetensorsDir a = load_safetensors_dir(in), b = load_safetensors_dir(out);
  int n = 0;
  for (auto& [name, t] : a.tensors) {
    if (!keep(name)) continue;
    ++n;
    auto it = b.tensors.find(name);
    if (it == b.tensors.end()) {
      ADD_FAILURE() << name << " missing from " << out;
      continue;
    }
    const Tensor& u = it->second;
    EXPECT_EQ(u.dtype, t.dtype) << name;
    EXPECT_EQ(u.shape, t.shape) << name;
    EXPECT_TRUE(u.nbytes == t.nbytes && std::equal(t.data, t.data + t.nbytes, u.data)) << name << ": bytes differ";
  }
  return n;
}

bool is_vision(const std::string& n) {
  return n.rfind("visual.", 0) == 0 || n.rfind("model.visual.", 0) == 0 || n.rfind("vision_tower.", 0) == 0 ||
         n.rfind("multi_modal_projector.", 0) == 0;
}
bool any_tensor(const std::string&) { return true; }

void expect_side_files(const std::string& in, const std::string& out) {
  for (const char* f : {"preprocessor_config.json", "chat_template.jinja"})
    EXPECT_EQ(file_bytes(out + "/" + f), file_bytes(in + "/" + f)) << f;
}

class TinyVlm : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyVlm, TextLogitsMatchTransformersVlm) {
  const json g = test::read_json(tiny(GetParam()) + "/logits.json");
  const Checkpoint ck = load_checkpoint(tiny(GetParam()));
  ASSERT_TRUE(ck.multimodal);
  const std::string p = GetParam();
  EXPECT_EQ(ck.config.arch, p == "gemma3_vl" ? "gemma3_text" : p == "qwen3_vl" ? "qwen3" : "qwen2");
  EXPECT_FALSE(ck.multimodal->passthrough.empty());
  for (auto& [name, t] : ck.multimodal->passthrough) EXPECT_TRUE(is_vision(name)) << name;
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  EXPECT_LT(test::max_abs_diff(test::fp32_logits(ck, ids, int(ids.size())), g["logits"].get<std::vector<float>>()),
            1e-4);
}

// --format hf at the source's dtype: every tensor as it was (the language model's too), the VLM's
// config.json as it was, the processor files copied; the output reads back as the same model.
TEST_P(TinyVlm, ConvertHfKeepsTheFolder) {
  const std::string in = tiny(GetParam()), out = test::temp_dir("vlm-hf") + "/out";
  std::string log;
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + in + " --out " + out, &log), 0) << log;
  EXPECT_GT(expect_same_tensors(in, out, is_vision), 10);
  expect_same_tensors(in, out, any_tensor);
  EXPECT_EQ(load_safetensors_dir(out).tensors.size(), load_safetensors_dir(in).tensors.size());
  EXPECT_EQ(test::read_json(out + "/config.json"), test::read_json(in + "/config.json"));
  expect_side_files(in, out);
  const json g = test::read_json(in + "/logits.json");
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  EXPECT_LT(test::max_abs_diff(test::fp32_logits(load_checkpoint(out), ids, int(ids.size())),
                               g["logits"].get<std::vector<float>>()),
            1e-4);
}

// compressed-tensors W8A8: the language model's Linears quantized, the vision tower and projector
// byte for byte and in the config's ignore list, the config otherwise the VLM's.
TEST_P(TinyVlm, ConvertCompressedTensorsKeepsTheVisionTower) {
  const std::string in = tiny(GetParam()), out = test::temp_dir("vlm-ct") + "/out";
  std::string log;
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + in + " --out " + out + " --scheme int8", &log), 0)
      << log;
  EXPECT_GT(expect_same_tensors(in, out, is_vision), 10);
  json cfg = test::read_json(out + "/config.json");
  const json q = cfg["quantization_config"];
  EXPECT_EQ(q["quant_method"], "compressed-tensors");
  bool vision_ignored = false;
  for (auto& m : q["ignore"])
    vision_ignored |= m.get<std::string>().find("vision_tower") != std::string::npos ||
                      m.get<std::string>().find("visual") != std::string::npos;
  EXPECT_TRUE(vision_ignored) << q["ignore"].dump();
  cfg.erase("quantization_config");
  EXPECT_EQ(cfg, test::read_json(in + "/config.json"));
  expect_side_files(in, out);
  const Checkpoint ck = load_checkpoint(out);
  ASSERT_TRUE(ck.multimodal);
  EXPECT_EQ(ck.source_kind, "compressed-tensors");
  EXPECT_EQ(ck.multimodal->passthrough.size(), load_checkpoint(in).multimodal->passthrough.size());
}

// compressed-tensors W4A16 (weight-only): transformers 5.24 loads our folder (the script records
// its logits) and they are our engine's logits of the same folder, within the bf16 rounding of
// q·s that compressed-tensors applies (results/compat.md, W4A16; 5e-4 here, ours keeps fp32).
TEST_P(TinyVlm, TransformersLoadsOurCompressedTensors) {
  const std::string in = tiny(GetParam()), out = test::temp_dir("vlm-w4") + "/out";
  std::string log;
  ASSERT_EQ(
      test::run_cmd(
          test::quanttool_bin() + " convert --in " + in + " --out " + out + " --scheme int4_ct --group-size 32", &log),
      0)
      << log;
  EXPECT_GT(expect_same_tensors(in, out, is_vision), 10);
  const json g = test::read_json(in + "/logits.json");
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  EXPECT_LT(test::max_abs_diff(our_logits(load_checkpoint(out), ids), g["logits_ct_w4a16"].get<std::vector<float>>()),
            2e-3);
}

INSTANTIATE_TEST_SUITE_P(Vlms, TinyVlm, ::testing::Values("qwen2_5_vl", "qwen3_vl", "gemma3_vl"));

// inspect shows the text model and says what is carried through.
TEST(Vlm, InspectNamesTheVisionTower) {
  std::string log;
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " inspect " + tiny("gemma3_vl"), &log), 0) << log;
  EXPECT_NE(log.find("architecture  gemma3_text"), std::string::npos) << log;
  EXPECT_NE(log.find("multimodal    Gemma3ForConditionalGeneration: the language model above (stored under "
                     "language_model.model.*); 50 vision / projector tensors"),
            std::string::npos)
      << log;
}

// The mlx layout as mlx_vlm loads it: the language model affine 4-bit, the vision tower's Linears at
// --vision-bits 8. Golden from mlx_vlm.convert on the same weights
// (scripts/check_mlx_vlm_export.py --golden: mlx_vlm 0.7.10's own folder, its quantized modules
// and its logits in float32): ours quantizes the same modules (mlx_vlm's paths in our config where
// the bits differ) and reads back to mlx_vlm's logits.
TEST(Vlm, ConvertMlxAsMlxVlmDoes) {
  const json golden = test::read_json(test::source_dir() + "/tests/golden/vlm/mlx_vlm.json");
  ASSERT_EQ(golden.size(), 2u);
  for (auto& [name, g] : golden.items()) {
    const std::string in = tiny(name), out = test::temp_dir("vlm-mlx") + "/out";
    std::string log;
    ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + in + " --out " + out +
                                " --format mlx --scheme affine --bits " + std::to_string(g["bits"].get<int>()) +
                                " --group-size " + std::to_string(g["group_size"].get<int>()) + " --vision-bits " +
                                std::to_string(g["vision_bits"].get<int>()),
                            &log),
              0)
        << log;
    const json cfg = test::read_json(out + "/config.json");
    const json& q = cfg["quantization"];
    // Every module mlx_vlm quantized has scales in ours, under its stored name; the vision tower's
    // (8 bits, not the global 4) are listed under mlx_vlm's paths.
    const SafetensorsDir st = load_safetensors_dir(out);
    int scales = 0, vision = 0;
    for (auto& [t, x] : st.tensors) scales += t.size() > 7 && t.compare(t.size() - 7, 7, ".scales") == 0;
    for (auto& m : g["quantized_modules"]) {
      const std::string p = m.get<std::string>();
      if (p.rfind("vision_tower.", 0) != 0) continue;
      ++vision;
      ASSERT_TRUE(q.contains(p)) << name << " " << p << " " << q.dump();
      EXPECT_EQ(q[p]["bits"], g["vision_bits"]) << p;
    }
    EXPECT_GT(vision, 3) << name;
    EXPECT_EQ(scales, int(g["quantized_modules"].size())) << name;
    const Checkpoint ck = load_checkpoint(out);
    ASSERT_TRUE(ck.multimodal);
    EXPECT_EQ(ck.source_kind, "mlx");
    const auto ids = g["ids"].get<std::vector<int32_t>>();
    EXPECT_LT(test::max_abs_diff(our_logits(ck, ids), g["logits"].get<std::vector<float>>()), 1e-4) << name;
  }
}

// Layouts that do not carry a vision tower: one error line, exit 2, nothing written.
TEST(Vlm, RefusesLayoutsWithoutTheVisionTower) {
  const std::string dir = test::temp_dir("vlm-refuse");
  for (const std::string& args :
       {"--format gguf --out " + dir + "/x.gguf", "--scheme int4 --format native --out " + dir + "/n",
        "--scheme int8 --untie --out " + dir + "/u", "--scheme int8 --vision-bits 8 --out " + dir + "/v",
        "--scheme affine --format hf --vision-bits 8 --out " + dir + "/v"}) {
    std::string log;
    EXPECT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + tiny("qwen2_5_vl") + " " + args, &log), 2)
        << args << "\n"
        << log;
    EXPECT_EQ(log.rfind("error: ", 0), 0u) << log;
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  }
  EXPECT_TRUE(fs::is_empty(dir));
}

// The names transformers 4.5x wrote from its in-memory modules ("model.language_model.*",
// "model.vision_tower.*", "model.multi_modal_projector.*"): read and written back the same way.
TEST(Vlm, InMemoryNamesReadAndWrittenBack) {
  const std::string in = tiny("gemma3_vl"), dir = test::temp_dir("vlm-names") + "/in";
  fs::create_directories(dir);
  const SafetensorsDir st = load_safetensors_dir(in);
  NamedTensors renamed;
  for (auto& [name, t] : st.tensors)
    renamed.emplace_back(
        name.rfind("language_model.model.", 0) == 0 ? "model.language_model." + name.substr(21) : "model." + name, t);
  write_safetensors(dir + "/model.safetensors", renamed);
  for (const char* f : {"config.json", "preprocessor_config.json", "chat_template.jinja"})
    fs::copy_file(in + "/" + f, dir + "/" + f);
  const Checkpoint ck = load_checkpoint(dir);
  ASSERT_TRUE(ck.multimodal);
  EXPECT_EQ(ck.multimodal->lm_prefix, "model.language_model.");
  EXPECT_TRUE(ck.has("model.layers.0.self_attn.q_proj.weight"));
  const json g = test::read_json(in + "/logits.json");
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  EXPECT_LT(test::max_abs_diff(test::fp32_logits(ck, ids, int(ids.size())), g["logits"].get<std::vector<float>>()),
            1e-4);
  const std::string out = test::temp_dir("vlm-names") + "/out";
  std::string log;
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + dir + " --out " + out, &log), 0) << log;
  EXPECT_EQ(expect_same_tensors(dir, out, any_tensor), int(st.tensors.size()));
}

// Released configs: Qwen2.5-VL keeps the text fields at the top with an "mrope" rope_scaling;
// Gemma 3's text_config lists only what differs from Gemma3TextConfig's defaults.
TEST(Vlm, ReleasedConfigs) {
  const json qwen = json::parse(R"({"architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl", "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
    "num_attention_heads": 16, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "max_position_embeddings": 128000, "sliding_window": 32768, "use_sliding_window": false,
    "tie_word_embeddings": true, "vocab_size": 151936, "torch_dtype": "bfloat16",
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {"depth": 32, "hidden_size": 1280, "out_hidden_size": 2048}})");
  const ModelConfig q = ModelConfig::from_hf_json(multimodal_text_config(qwen, "q"), "q");
  EXPECT_EQ(q.arch, "qwen2");
  EXPECT_EQ(q.hidden, 2048);
  EXPECT_EQ(q.n_kv_heads, 2);
  EXPECT_EQ(q.head_dim, 128);
  EXPECT_TRUE(q.tie_word_embeddings);
  EXPECT_TRUE(q.attention_bias);
  EXPECT_EQ(q.rope_theta, 1e6f);
  EXPECT_TRUE(q.rope_scaling.type.empty());
  const json gemma = json::parse(R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "mm_tokens_per_image": 256, "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
    "model_type": "gemma3_text", "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "sliding_window": 1024}, "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}})");
  const ModelConfig g = ModelConfig::from_hf_json(multimodal_text_config(gemma, "g"), "g");
  EXPECT_EQ(g.arch, "gemma3_text");
  EXPECT_EQ(g.n_heads, 8);
  EXPECT_EQ(g.n_kv_heads, 4);
  EXPECT_EQ(g.head_dim, 256);
  EXPECT_EQ(g.vocab, 262208);
  EXPECT_TRUE(g.tie_word_embeddings);
  EXPECT_EQ(g.rope_scaling.type, "linear");
  EXPECT_EQ(g.sliding_window, 1024);
  EXPECT_EQ(g.query_pre_attn_scalar, 256.0f);
  EXPECT_TRUE(g.is_sliding(0));
  EXPECT_FALSE(g.is_sliding(5));
  // Another vision-language model: refused by name.
  EXPECT_NE(unsupported_multimodal(json::parse(R"({"architectures": ["LlavaForConditionalGeneration"],
    "model_type": "llava", "vision_config": {}})"))
                .find("LlavaForConditionalGeneration"),
            std::string::npos);
}

}  // namespace
}  // namespace qt
