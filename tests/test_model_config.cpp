// ModelConfig against transformers: config.json files saved by transformers' own config classes
// (v5 form) with the attributes transformers derives from them, llama3 rope factors from
// transformers' rope init, tiny GGUFs read by transformers' GGUF loader, and the real model's
// published configuration (HuggingFaceTB/SmolLM2-135M). Golden files:
// tests/golden/make_hf_export_golden.py.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/model_config.h"
#include "tests/support.h"

namespace qt {
namespace {

using nlohmann::json;

json golden(const std::string& name) {
  std::ifstream f(test::source_dir() + "/tests/golden/hf_export/" + name);
  EXPECT_TRUE(f.good()) << name;
  return json::parse(f);
}

// Compare a parsed config with the attributes transformers reports (make_hf_export_golden.py
// config_facts()).
void expect_facts(const ModelConfig& c, const json& e, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(c.arch, e["model_type"].get<std::string>());
  EXPECT_EQ(c.hidden, e["hidden_size"].get<int>());
  EXPECT_EQ(c.intermediate, e["intermediate_size"].get<int>());
  EXPECT_EQ(c.n_layers, e["num_hidden_layers"].get<int>());
  EXPECT_EQ(c.n_heads, e["num_attention_heads"].get<int>());
  EXPECT_EQ(c.n_kv_heads, e["num_key_value_heads"].get<int>());
  EXPECT_EQ(c.head_dim, e["head_dim"].get<int>());
  EXPECT_EQ(c.vocab, e["vocab_size"].get<int>());
  EXPECT_EQ(c.max_position, e["max_position_embeddings"].get<int>());
  EXPECT_EQ(c.rms_eps, float(e["rms_norm_eps"].get<double>()));
  EXPECT_EQ(c.rope_theta, float(e["rope_theta"].get<double>()));
  EXPECT_EQ(c.tie_word_embeddings, e["tie_word_embeddings"].get<bool>());
  auto first_id = [](const json& v) { return v.is_null() ? -1 : v.is_array() ? v[0].get<int>() : v.get<int>(); };
  EXPECT_EQ(c.bos_token_id, first_id(e["bos_token_id"]));
  EXPECT_EQ(c.eos_token_id, first_id(e["eos_token_id"]));
  std::string rope_type = e["rope_type"];
  EXPECT_EQ(c.rope_scaling.type, rope_type == "default" ? "" : rope_type);
  if (rope_type == "llama3") {
    EXPECT_EQ(c.rope_scaling.factor, float(e["rope_factor"].get<double>()));
    EXPECT_EQ(c.rope_scaling.low_freq_factor, float(e["rope_low_freq_factor"].get<double>()));
    EXPECT_EQ(c.rope_scaling.high_freq_factor, float(e["rope_high_freq_factor"].get<double>()));
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, e["rope_original_max_position_embeddings"].get<int>());
  }
  EXPECT_EQ(c.attention_bias, c.arch == "qwen2");
  EXPECT_EQ(c.desc().qk_norm == QkNorm::PerHead, c.arch == "qwen3");
}

TEST(ModelConfig, TransformersSavedConfigs) {
  json g = golden("configs.json");
  ASSERT_EQ(g["configs"].size(), 5u);
  for (auto& [name, c] : g["configs"].items()) {
    ModelConfig mc = ModelConfig::from_hf_json(c["config_json"], name + "/config.json");
    expect_facts(mc, c["expected"], name);
    // Our own config.json must read back to the same configuration.
    ModelConfig again = ModelConfig::from_hf_json(mc.to_hf_json(), name + " (re-read)");
    expect_facts(again, c["expected"], name + " re-read");
  }
}

TEST(ModelConfig, V4FormAndDefaults) {
  // transformers v4 form: rope_theta / rope_scaling at the top, "type" spelling, torch_dtype.
  json j = json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
      "rope_theta": 500000.0, "rope_scaling": {"type": "linear", "factor": 2.0},
      "torch_dtype": "bfloat16", "eos_token_id": [7, 8]})");
  ModelConfig c = ModelConfig::from_hf_json(j, "v4.json");
  EXPECT_EQ(c.arch, "llama");       // from architectures when model_type is absent
  EXPECT_EQ(c.n_kv_heads, 4);       // defaults to num_attention_heads
  EXPECT_EQ(c.head_dim, 16);        // hidden / heads
  EXPECT_EQ(c.rms_eps, 1e-6f);      // LlamaConfig default
  EXPECT_EQ(c.max_position, 2048);  // LlamaConfig default
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 2.0f);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.eos_token_id, 7);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.tie_word_embeddings);
  // 2 layers x (q 64x64 + k,v 64x64 each + o 64x64 + 3 x 64x128 + 2 norms) + embed + head + norm
  EXPECT_EQ(c.n_params(), 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 2 * 100 * 64 + 64);
  // v5 llama3 without original_max_position_embeddings: filled from max_position_embeddings.
  json k = json::parse(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 4096,
      "rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0,
                          "low_freq_factor": 1.0, "high_freq_factor": 4.0}})");
  ModelConfig d = ModelConfig::from_hf_json(k, "v5.json");
  EXPECT_EQ(d.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(d.rope_theta, 10000.0f);
}

// SmolLM3-3B's shape without its no_rope_layers list: SmolLM3Config leaves every
// no_rope_layer_interval-th (default 4th) layer without RoPE; its defaults (rope_theta 2e6, tied
// head). The parameter count is the model card's 3.08B (3,075,098,624 from these shapes).
TEST(ModelConfig, SmolLM3DefaultsAndSize) {
  json j = json::parse(R"({"model_type": "smollm3", "hidden_size": 2048, "intermediate_size": 11008,
      "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 128256})");
  ModelConfig c = ModelConfig::from_hf_json(j, "s3.json");
  ASSERT_EQ(c.no_rope.size(), 36u);
  for (int i = 0; i < 36; ++i) EXPECT_EQ(c.has_rope(i), (i + 1) % 4 != 0) << i;
  EXPECT_EQ(c.rope_theta, 2e6f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.n_params(), 3075098624);
  ModelConfig again = ModelConfig::from_hf_json(c.to_hf_json(), "again.json");
  EXPECT_EQ(again.no_rope, c.no_rope);
  j["no_rope_layers"] = json::array({1, 0});
  EXPECT_THROW(ModelConfig::from_hf_json(j, "s3.json"), UserError);
}

// OLMo-2-0425-1B's shape: q/k norms over the whole projection count n_heads·head_dim and
// n_kv_heads·head_dim parameters each; the model card's 1.48B.
TEST(ModelConfig, Olmo2Size) {
  json j = json::parse(R"({"model_type": "olmo2", "hidden_size": 2048, "intermediate_size": 8192,
      "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 100352,
      "rms_norm_eps": 1e-6})");
  ModelConfig c = ModelConfig::from_hf_json(j, "o2.json");
  EXPECT_EQ(c.desc().qk_norm, QkNorm::Whole);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.n_params(), 1484916736);
}

// Gemma 2 / Gemma 3 in transformers' v4 form (released checkpoints: sliding_window_pattern,
// rope_local_base_freq, rope_scaling at the top) and with the defaults of Gemma2Config /
// Gemma3TextConfig (values read in transformers 5.24's configuration_gemma2/3.py). The v5
// form transformers saves is read by the tiny-gemma goldens (test_model.cpp).
TEST(ModelConfig, GemmaV4FormAndDefaults) {
  json j = json::parse(R"({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
      "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144, "query_pre_attn_scalar": 256,
      "rope_theta": 1000000, "rope_local_base_freq": 10000, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
      "sliding_window": 512, "sliding_window_pattern": 6, "final_logit_softcapping": null,
      "attn_logit_softcapping": null})");
  ModelConfig c = ModelConfig::from_hf_json(j, "g3.json");
  EXPECT_TRUE(c.desc().gemma_attention);
  EXPECT_EQ(c.desc().qk_norm, QkNorm::PerHead);
  EXPECT_TRUE(c.tie_word_embeddings);  // Gemma3TextConfig default
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_local_theta, 1e4f);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.attn_softcap, 0.0f);
  EXPECT_EQ(c.final_softcap, 0.0f);
  EXPECT_EQ(c.sliding_window, 512);
  for (int i = 0; i < c.n_layers; ++i) EXPECT_EQ(c.is_sliding(i), (i + 1) % 6 != 0) << i;
  EXPECT_EQ(c.attn_scale(), float(1.0 / 16.0));
  // to_hf_json reads back to the same configuration, and says the period mlx_lm reads.
  json out = c.to_hf_json();
  EXPECT_EQ(out["sliding_window_pattern"], 6);
  ModelConfig again = ModelConfig::from_hf_json(out, "again.json");
  EXPECT_EQ(again.sliding, c.sliding);
  EXPECT_EQ(again.rope_local_theta, c.rope_local_theta);
  EXPECT_EQ(again.rope_scaling.type, "linear");
  EXPECT_EQ(again.query_pre_attn_scalar, 256.0f);
  EXPECT_EQ(again.n_params(), c.n_params());

  // Gemma2Config defaults: head_dim 256, soft-caps 50 / 30, every other layer sliding from 0.
  json k = json::parse(R"({"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 4, "num_attention_heads": 2, "vocab_size": 100})");
  ModelConfig d = ModelConfig::from_hf_json(k, "g2.json");
  EXPECT_EQ(d.head_dim, 256);
  EXPECT_EQ(d.attn_softcap, 50.0f);
  EXPECT_EQ(d.final_softcap, 30.0f);
  EXPECT_EQ(d.query_pre_attn_scalar, 256.0f);
  EXPECT_EQ(d.sliding_window, 4096);
  EXPECT_EQ(d.rope_theta, 10000.0f);
  EXPECT_EQ(d.sliding, (std::vector<uint8_t>{1, 0, 1, 0}));
  EXPECT_TRUE(d.tie_word_embeddings);
  // 4 layers x (q, o 512x64 + k, v 512x64 + 3 x 64x128 + 4 norms) + embed (tied) + norm
  EXPECT_EQ(d.n_params(), 4 * (4 * 512 * 64 + 3 * 64 * 128 + 4 * 64) + 100 * 64 + 64);
}

// Each bad config is refused with a message naming the file and the problem.
TEST(ModelConfig, BadConfigs) {
  const std::string base = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                              "num_attention_heads": 4, "vocab_size": 100)";
  struct Case {
    std::string json, needle;
  };
  const Case cases[] = {
      {R"({"model_type": "gpt_neox", )" + base + "}",
       "unsupported architecture 'gpt_neox' (supported: llama, mistral, qwen2"},
      {R"({"model_type": "gemma3", "text_config": {}})", "Gemma3ForConditionalGeneration"},
      {R"({"model_type": "gemma2", )" + base + R"(, "hidden_activation": "gelu"})", "hidden_activation 'gelu'"},
      {R"({"model_type": "gemma2", )" + base + R"(, "layer_types": ["full_attention", "x"]})", "layer_types"},
      {R"({"model_type": "gemma3_text", )" + base + R"(, "use_bidirectional_attention": true})", "bidirectional"},
      {R"({"architectures": ["GPT2LMHeadModel"], )" + base + "}", "'GPT2LMHeadModel'"},
      {R"({"model_type": "phi3", )" + base +
           R"(, "rope_scaling": {"type": "longrope", "short_factor": [1], "long_factor": [1]}})",
       "rope scaling type 'longrope'"},
      {R"({"model_type": "phi3", )" + base +
           R"(, "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.75}})",
       "partial_rotary_factor 0.75"},
      {R"({"hidden_size": 64})", "no 'model_type' or 'architectures'"},
      {R"({"model_type": "llama", "hidden_size": 64})", "missing 'intermediate_size'"},
      {R"({"model_type": "llama", )" + base + R"(, "num_key_value_heads": 3})", "not a multiple of 3"},
      {R"({"model_type": "llama", )" + base + R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4}})",
       "rope scaling type 'yarn'"},
      {R"({"model_type": "llama", )" + base + R"(, "mlp_bias": true})", "mlp_bias"},
      {R"({"model_type": "llama", )" + base + R"(, "attention_bias": true})", "attention_bias"},
      {R"({"model_type": "llama", )" + base + R"(, "hidden_act": "gelu"})", "hidden_act 'gelu'"},
      {R"({"model_type": "llama", "hidden_size": "64", "intermediate_size": 1, "num_hidden_layers": 1,
          "num_attention_heads": 4, "vocab_size": 1})",
       "'hidden_size' must be an integer"},
      {R"({"model_type": "llama", )" + base + R"(, "rms_norm_eps": "x"})", "'rms_norm_eps' must be a number"},
      {R"({"model_type": "llama", )" + base + R"(, "head_dim": 15})", "head_dim 15 must be even"},
      {R"([1, 2])", "must be a JSON object"},
  };
  for (auto& tc : cases) {
    SCOPED_TRACE(tc.json);
    try {
      ModelConfig::from_hf_json(json::parse(tc.json), "dir/config.json");
      ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("dir/config.json: "), std::string::npos) << m;
      EXPECT_NE(m.find(tc.needle), std::string::npos) << m;
    }
  }
}

// rope_freqs.weight (the only trace of llama3 scaling in a GGUF) back to the HF parameters.
TEST(ModelConfig, Llama3RopeFreqsFromTransformers) {
  json g = golden("configs.json");
  ASSERT_EQ(g["rope_freqs"].size(), 2u);
  for (auto& rf : g["rope_freqs"]) {
    std::vector<float> ff = rf["factors"].get<std::vector<float>>();
    double theta = rf["rope_theta"];
    int hd = rf["head_dim"];
    auto& want = rf["rope_scaling"];
    RopeScaling r = llama3_scaling_from_rope_freqs(ff, theta, hd, "x.gguf");
    EXPECT_EQ(r.type, "llama3");
    EXPECT_EQ(r.factor, float(want["factor"].get<double>()));
    EXPECT_EQ(r.low_freq_factor, float(want["low_freq_factor"].get<double>()));
    EXPECT_EQ(r.high_freq_factor, float(want["high_freq_factor"].get<double>()));
    EXPECT_EQ(r.original_max_position_embeddings, want["original_max_position_embeddings"].get<int>());
    auto back = llama3_rope_factors(r, theta, hd);
    ASSERT_EQ(back.size(), ff.size());
    for (size_t i = 0; i < ff.size(); ++i) EXPECT_NEAR(back[i], ff[i], 2e-6 * ff[i]) << i;
  }
  // All ones: no scaling. Nonsense: refused.
  EXPECT_EQ(llama3_scaling_from_rope_freqs(std::vector<float>(32, 1.0f), 1e4, 64, "x").type, "");
  std::vector<float> bad(32, 1.0f);
  bad[3] = 7.0f;
  EXPECT_THROW(llama3_scaling_from_rope_freqs(bad, 1e4, 64, "x"), UserError);
  EXPECT_THROW(llama3_scaling_from_rope_freqs(bad, 1e4, 62, "x"), UserError);  // wrong length
}

TEST(ModelConfig, TinyGgufsAsTransformersReadsThem) {
  json g = golden("tiny.json");
  ASSERT_EQ(g.size(), 3u);
  for (auto& [name, t] : g.items()) {
    GgufFile f = GgufFile::open(test::source_dir() + "/tests/golden/hf_export/" + t["file"].get<std::string>());
    expect_facts(ModelConfig::from_gguf(f), t["config"], name);
  }
}

TEST(ModelConfig, RealModelFacts) {
  QT_REQUIRE_FILE(test::model_gguf());
  GgufFile g = GgufFile::open(test::model_gguf());
  ModelConfig c = ModelConfig::from_gguf(g);
  // SmolLM2-135M's published configuration (its config.json on the Hugging Face Hub).
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.hidden, 576);
  EXPECT_EQ(c.intermediate, 1536);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab, 49152);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.rope_scaling.type, "");
  EXPECT_FALSE(g.get_bool("tokenizer.ggml.add_bos_token"));
  // And everything transformers' GGUF loader reads from the same file.
  json s = golden("smollm2_q4_1.json");
  expect_facts(c, s["config"], "smollm2");
  // Parameter count = elements of the tensors transformers loads (tied head counted once).
  int64_t n = 0;
  for (auto& [name, t] : s["tensors"].items()) {
    int64_t e = 1;
    for (auto d : t["shape"]) e *= d.get<int64_t>();
    n += e;
  }
  EXPECT_EQ(c.n_params(), n);
  EXPECT_EQ(c.n_params(), 134515008);
  // Our config.json carries what transformers needs.
  json hf = c.to_hf_json();
  EXPECT_EQ(hf["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(hf["rms_norm_eps"].get<double>(), 1e-5);  // written as 1e-05, not 9.99999974e-06
  EXPECT_EQ(hf["rope_theta"].get<double>(), 100000.0);
  EXPECT_EQ(hf["pad_token_id"].get<int>(), 2);
  EXPECT_TRUE(hf["rope_scaling"].is_null());
}

}  // namespace
}  // namespace qt
