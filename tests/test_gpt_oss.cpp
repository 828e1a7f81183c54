// gpt_oss on the CPU against transformers' fp32 logits of a tiny random GptOssForCausalLM
// (tests/golden/make_gpt_oss_golden.py): router bias with top-k before the softmax, fused and
// interleaved experts with biases and the clamped SwiGLU, attention biases and sinks, alternating
// sliding / full layers (the tokens reach past the window), YaRN RoPE; the same model with its
// experts stored as MXFP4 (the released checkpoints' form), dequantized at load.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/gpt_oss_experts.h"
#include "formats/safetensors.h"
#include "libquant/eval/perplexity.h"
#include "libquant/kv/key_center.h"
#include "libquant/kv/spec.h"
#include "libquant/model/llama.h"
#include "libquant/schemes/packed_io.h"
#include "tests/support.h"

namespace qt {
namespace {

using nlohmann::json;
using test::max_abs_diff;

std::string tiny(const std::string& name) { return test::tiny_dir(name); }

using Golden = test::TinyGolden;
Golden golden(const std::string& name) { return test::tiny_golden(name); }
std::vector<float> logits(const Checkpoint& ck, const std::vector<int32_t>& ids, const std::string& kv,
                          bool one_by_one) {
  return test::cached_logits(ck, ids, kv, one_by_one);
}

TEST(GptOss, ConfigAndTensors) {
  Golden g = golden("gpt-oss");
  const ModelConfig& c = g.ck.config;
  EXPECT_EQ(c.arch, "gpt_oss");
  EXPECT_EQ(c.n_experts, 4);
  EXPECT_EQ(c.n_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate, 64);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.sliding, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_FLOAT_EQ(c.swiglu_limit, 7.0f);
  EXPECT_FLOAT_EQ(c.swiglu_alpha, 1.702f);
  EXPECT_TRUE(g.ck.has("model.layers.2.mlp.experts.3.up_proj.bias"));
  EXPECT_TRUE(g.ck.has("model.layers.0.self_attn.sinks"));
  const ModelConfig r = ModelConfig::from_hf_json(c.to_hf_json(), "round trip");
  EXPECT_EQ(r.sliding, c.sliding);
  EXPECT_EQ(r.rope_scaling.type, "yarn");
  EXPECT_EQ(r.rope_scaling.truncate, c.rope_scaling.truncate);
  EXPECT_EQ(r.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(r.n_params(), c.n_params());
  int64_t stored = 0;
  for (auto& [name, t] : g.ck.tensors) stored += t.numel();
  EXPECT_EQ(c.n_params(), stored);
}

TEST(GptOss, LogitsMatchTransformers) {
  for (const char* name : {"gpt-oss", "gpt-oss-mxfp4"}) {
    Golden g = golden(name);
    const double d = max_abs_diff(logits(g.ck, g.ids, "f32", false), g.logits);
    std::printf("tiny-%s max |dlogit| vs transformers %.3g\n", name, d);
    EXPECT_LT(d, 1e-4) << name;
    EXPECT_LT(max_abs_diff(logits(g.ck, g.ids, "f32", true), g.logits), 1e-4) << name;
    EXPECT_LT(max_abs_diff(logits(g.ck, g.ids, "f16", false), g.logits), 1e-2) << name;
  }
}

// eval-ppl's chunks at ctx 8 = transformers' mean NLL, with an f16 cache and a KL baseline.
TEST(GptOss, Perplexity) {
  for (const char* name : {"gpt-oss", "gpt-oss-mxfp4"}) {
    Golden g = golden(name);
    LlamaModel m(g.ck, Compute::F32), base(g.ck, Compute::F32);
    PplOptions o;
    o.method = PplMethod::Chunks;
    o.ctx = 8;
    PplResult r = evaluate_perplexity(m, g.ids, o);
    EXPECT_EQ(r.tokens_scored, 21);
    EXPECT_NEAR(r.mean_nll, g.ppl_chunks_ctx8, 1e-5) << name;
    const kv::KVSpec s = kv::parse_kv_spec("f16", "--kv");
    o.kv = kv::uniform_kv_config(g.ck.config.n_layers, s, s);
    r = evaluate_perplexity(m, g.ids, o, &base);
    ASSERT_TRUE(r.kld);
    EXPECT_NEAR(r.mean_nll, g.ppl_chunks_ctx8, 1e-3) << name;
    EXPECT_LT(r.kld->kld, 1e-4) << name;
    // the quantized caches honour the sinks and windows (8-bit close; low-bit ones finite)
    for (const char* kv : {"affine:bits=8", "kivi:bits=8", "kivi:bits=2", "turboquant_mse:bits=3", "qjl:bits=2",
                           "rvq:bits=2", "polar:bits=4", "rabitq:bits=2"}) {
      SCOPED_TRACE(kv);
      const kv::KVSpec q = kv::parse_kv_spec(kv, "--kv");
      o.kv = kv::uniform_kv_config(g.ck.config.n_layers, q, q);
      r = evaluate_perplexity(m, g.ids, o, &base);
      ASSERT_TRUE(r.kld);
      EXPECT_TRUE(std::isfinite(r.mean_nll) && std::isfinite(r.kld->kld));
      if (std::string(kv).find("bits=8") != std::string::npos) {
        EXPECT_NEAR(r.mean_nll, g.ppl_chunks_ctx8, 0.05);
        EXPECT_LT(r.kld->kld, 0.01);
      }
    }
  }
}

// convert --format hf fuses the experts back into transformers' names (bf16 and MXFP4 sources):
// the folder reads back to the same logits; --rotate is refused with one line (GGUF:
// tests/test_gguf_gptoss.cpp; bitsandbytes: test_bnb_moe.cpp).
TEST(GptOss, ConvertHfRoundTripAndRefusals) {
  const std::string tmp = test::temp_dir("gpt_oss");
  std::string log;
  for (const char* name : {"gpt-oss", "gpt-oss-mxfp4"}) {
    SCOPED_TRACE(name);
    Golden g = golden(name);
    const std::string out = tmp + "/" + name;
    ASSERT_EQ(
        test::run_cmd(test::quanttool_bin() + " convert --in " + tiny(name) + " --out " + out + " --dtype f32", &log),
        0)
        << log;
    Checkpoint ck = load_checkpoint(out);
    EXPECT_TRUE(ck.has("model.layers.0.mlp.experts.3.gate_proj.bias"));
    EXPECT_EQ(ck.tensors.size(), g.ck.tensors.size());
    EXPECT_LT(max_abs_diff(logits(ck, g.ids, "f32", false), g.logits), 1e-4);
  }
  for (const char* args : {"--rotate"}) {
    SCOPED_TRACE(args);
    const std::string out = tmp + "/refused";
    EXPECT_EQ(
        test::run_cmd(test::quanttool_bin() + " convert --in " + tiny("gpt-oss") + " --out " + out + " " + args, &log),
        2)
        << log;
    EXPECT_NE(log.find("error:"), std::string::npos) << log;
  }
}

// compressed-tensors (int8 per channel) and native (int4 per channel): the experts quantized per
// expert, the routers float; read back and run with the packed Linears (a sanity bound only: the
// tiny random model amplifies rounding, as tiny-mixtral does in test_moe).
TEST(GptOss, QuantizedKeepsRoutersFloat) {
  Golden g = golden("gpt-oss");
  const ModelConfig& c = g.ck.config;
  const std::string tmp = test::temp_dir("gpt_oss_q");
  std::string log;
  int i = 0;
  for (const char* args :
       {"--format compressed-tensors --scheme int8 --group-size 0", "--format native --scheme int4 --group-size 0"}) {
    SCOPED_TRACE(args);
    const std::string out = tmp + "/" + std::to_string(i++);
    ASSERT_EQ(
        test::run_cmd(test::quanttool_bin() + " convert --in " + tiny("gpt-oss") + " --out " + out + " " + args, &log),
        0)
        << log;
    Checkpoint ck = load_checkpoint(out);
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
      EXPECT_FALSE(packed_weight(ck, p + "router.weight"));
      EXPECT_TRUE(packed_weight(ck, p + "experts.3.gate_proj.weight"));
    }
    LlamaModel m(ck, checkpoint_linear_factory(ck, {}));
    const int n = int(g.ids.size());
    auto cache = m.make_cache(n);
    std::vector<float> got(size_t(n) * c.vocab);
    m.forward(g.ids.data(), n, 0, *cache, 0, n, got.data());
    const double d = max_abs_diff(got, g.logits);
    std::printf("tiny-gpt-oss %s max |dlogit| %.3g\n", args, d);
    EXPECT_LT(d, 8.0);
  }
}

// The mlx layout as mlx_lm's GptOss model stores it (experts stacked as mlp.experts.<proj> with their
// biases, the router at 8 bits / group 64 where the hidden size takes it). Golden: what mlx_lm itself
// computes from our folder (tests/golden/make_gpt_oss_mlx_golden.py: mlx_lm.utils.load_model, the
// quantized modules as mx.dequantize gives them, float32): our engine reads the folder to the same
// logits, and mlx_lm built a quantized module for each one we quantized. YaRN's "truncate" is set
// true in both: mlx_lm always truncates (the script says where).
TEST(GptOss, MlxAsMlxLmReadsIt) {
  const json want = test::read_json(tiny("gpt-oss") + "/mlx_lm_affine4_g32.json");
  const std::string dir = test::temp_dir("gpt_oss_mlx"), src = dir + "/src", out = dir + "/mlx";
  std::filesystem::copy(tiny("gpt-oss"), src);
  json cfg = test::read_json(src + "/config.json");
  cfg["rope_parameters"]["truncate"] = true;
  std::ofstream(src + "/config.json") << cfg.dump(2);
  std::string log;
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + src + " --out " + out +
                              " --format mlx --scheme affine --bits 4 --group-size 32",
                          &log),
            0)
      << log;
  const SafetensorsDir st = load_safetensors_dir(out);
  int scales = 0;
  for (auto& [name, t] : st.tensors) scales += name.size() > 7 && name.compare(name.size() - 7, 7, ".scales") == 0;
  EXPECT_EQ(scales, int(want["quantized_modules"].size()));
  EXPECT_TRUE(st.tensors.count("model.layers.0.mlp.experts.gate_proj.bias"));
  EXPECT_EQ(st.tensors.at("model.layers.0.mlp.experts.gate_proj.scales").shape[0], 4);
  Checkpoint ck = load_checkpoint(out);
  EXPECT_EQ(ck.source_kind, "mlx");
  EXPECT_TRUE(ck.has("model.layers.0.mlp.experts.3.gate_proj.bias"));
  const auto ids = want["ids"].get<std::vector<int32_t>>();
  LlamaModel m(ck, checkpoint_linear_factory(ck, {}));
  const int n = int(ids.size());
  auto cache = m.make_cache(n);
  std::vector<float> got(size_t(n) * ck.config.vocab);
  m.forward(ids.data(), n, 0, *cache, 0, n, got.data());
  EXPECT_LT(max_abs_diff(got, want["logits"].get<std::vector<float>>()), 1e-4);
}

TEST(GptOss, KeyCenteringRefused) {
  Golden g = golden("gpt-oss");
  LlamaModel m(g.ck, Compute::F32);
  kv::KVConfig k =
      kv::uniform_kv_config(g.ck.config.n_layers, kv::parse_kv_spec("f32", "--kv"), kv::parse_kv_spec("f32", "--kv"));
  auto c = std::make_shared<kv::KeyCenter>();
  c->layers = g.ck.config.n_layers, c->kv_heads = g.ck.config.n_kv_heads, c->head_dim = g.ck.config.head_dim;
  c->mean.assign(size_t(c->layers) * c->kv_heads * c->head_dim, 0.1f);
  k.key_center = c;
  EXPECT_THROW(m.make_cache(16, k), UserError);
}

// E2M1 codes (low nibble first) times 2^(scale − 127), as transformers' convert_moe_packed_tensors.
TEST(GptOss, Mxfp4Decoder) {
  std::vector<uint8_t> blocks(16), scales{128};
  for (int i = 0; i < 16; ++i) blocks[size_t(i)] = uint8_t(i | ((15 - i) << 4));
  const std::vector<float> v = mxfp4_dequantize(blocks.data(), scales.data(), 1, 1);
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(v[size_t(2 * i)], 2 * e2m1[i]);
    EXPECT_EQ(v[size_t(2 * i + 1)], 2 * e2m1[15 - i]);
  }
  scales[0] = 125;
  EXPECT_EQ(mxfp4_dequantize(blocks.data(), scales.data(), 1, 1)[14], 0.25f * 6);  // code 7 at 2^-2
}

}  // namespace
}  // namespace qt
