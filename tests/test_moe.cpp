// Mixture-of-experts decoders (qwen3_moe, mixtral) on the CPU against transformers' fp32 logits of
// tiny random models (tests/golden/make_arch_logits_golden.py: tiny-qwen3-moe with a dense middle
// layer and unrenormalised top-2 weights, tiny-mixtral renormalised; 4 experts, head_dim 32):
// the batch forward, token by token, eval-ppl's chunks with KV methods and a KL baseline, the
// config round trip and `convert --format hf` back to the same logits; compressed-tensors and
// native with the routers kept float; --rotate refused.
#include <algorithm>
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/error.h"
#include "libquant/eval/perplexity.h"
#include "libquant/kv/spec.h"
#include "libquant/model/llama.h"
#include "libquant/schemes/packed_io.h"
#include "tests/support.h"

namespace qt {
namespace {

using nlohmann::json;

std::string tiny(const std::string& name) { return test::tiny_dir(name); }

using test::read_json;

using Golden = test::TinyGolden;
Golden golden(const std::string& name) { return test::tiny_golden(name); }
std::vector<float> logits(const Checkpoint& ck, const std::vector<int32_t>& ids, const std::string& kv,
                          bool one_by_one) {
  return test::cached_logits(ck, ids, kv, one_by_one);
}

using test::max_abs_diff;

class TinyMoe : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyMoe, ConfigAndTensors) {
  Golden g = golden(GetParam());
  const ModelConfig& c = g.ck.config;
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(c.n_experts, 4);
  EXPECT_EQ(c.n_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate, 48);
  EXPECT_EQ(c.head_dim, 32);
  if (c.arch == "qwen3_moe") {
    EXPECT_FALSE(c.norm_topk_prob);
    EXPECT_EQ(c.dense_mlp, (std::vector<uint8_t>{0, 1, 0}));
    EXPECT_TRUE(g.ck.has("model.layers.1.mlp.gate_proj.weight"));
    EXPECT_TRUE(g.ck.has("model.layers.2.mlp.experts.3.down_proj.weight"));
  } else {
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_TRUE(c.dense_mlp.empty());
    EXPECT_TRUE(g.ck.has("model.layers.1.block_sparse_moe.experts.3.w2.weight"));
  }
  // Written and read back: the same configuration.
  const ModelConfig r = ModelConfig::from_hf_json(c.to_hf_json(), "round trip");
  EXPECT_EQ(r.arch, c.arch);
  EXPECT_EQ(r.n_experts, c.n_experts);
  EXPECT_EQ(r.n_experts_per_tok, c.n_experts_per_tok);
  EXPECT_EQ(r.moe_intermediate, c.moe_intermediate);
  EXPECT_EQ(r.intermediate, c.intermediate);
  EXPECT_EQ(r.norm_topk_prob, c.norm_topk_prob);
  EXPECT_EQ(r.dense_mlp, c.dense_mlp);
  EXPECT_EQ(r.n_params(), c.n_params());
  int64_t stored = 0;
  for (auto& [name, t] : g.ck.tensors) stored += t.numel();
  EXPECT_EQ(c.n_params(), stored);
}

TEST_P(TinyMoe, LogitsMatchTransformers) {
  Golden g = golden(GetParam());
  const double d = max_abs_diff(logits(g.ck, g.ids, "f32", false), g.logits);
  std::printf("tiny-%s max |dlogit| vs transformers %.3g\n", GetParam().c_str(), d);
  EXPECT_LT(d, 1e-4);
  // bf16 compute runs; a sanity bound only: rounded activations may pick another expert where
  // the router's top-k margin is small (0.0025 in tiny-mixtral), which moves a logit by ~0.8.
  LlamaModel m(g.ck, Compute::BF16);
  const int n = int(g.ids.size());
  auto cache = m.make_cache(n);
  std::vector<float> got(size_t(n) * g.ck.config.vocab);
  m.forward(g.ids.data(), n, 0, *cache, 0, n, got.data());
  const double b = max_abs_diff(got, g.logits);
  std::printf("tiny-%s bf16 compute max |dlogit| %.3g\n", GetParam().c_str(), b);
  EXPECT_LT(b, 2.0);
}

// One token at a time (generate's and eval's single-token path) = the batch forward.
TEST_P(TinyMoe, OneTokenAtATimeMatchesBatch) {
  Golden g = golden(GetParam());
  EXPECT_LT(max_abs_diff(logits(g.ck, g.ids, "f32", true), g.logits), 1e-4);
  const std::vector<float> batch = logits(g.ck, g.ids, "f16", false);
  EXPECT_LT(max_abs_diff(logits(g.ck, g.ids, "f16", true), batch), 1e-4);
}

// The routing really matters: the other renormalisation, or a dense layer made sparse, moves
// the logits well beyond the 1e-4 bar.
TEST_P(TinyMoe, RoutingMatters) {
  Golden g = golden(GetParam());
  g.ck.config.norm_topk_prob = !g.ck.config.norm_topk_prob;
  EXPECT_GT(max_abs_diff(logits(g.ck, g.ids, "f32", false), g.logits), 1e-2);
  g.ck.config.norm_topk_prob = !g.ck.config.norm_topk_prob;
  g.ck.config.n_experts_per_tok = 1;
  EXPECT_GT(max_abs_diff(logits(g.ck, g.ids, "f32", false), g.logits), 1e-2);
}

// eval-ppl's chunks at ctx 8 = transformers' mean NLL; every KV method runs (8-bit close, the
// low-bit ones finite: random keys); a KL baseline (the model itself through an f32 cache).
TEST_P(TinyMoe, PerplexityKvMethodsAndKld) {
  Golden g = golden(GetParam());
  LlamaModel m(g.ck, Compute::F32);
  LlamaModel base(g.ck, Compute::F32);
  PplOptions o;
  o.method = PplMethod::Chunks;
  o.ctx = 8;
  for (int ubatch : {0, 3}) {
    o.ubatch = ubatch;
    const PplResult r = evaluate_perplexity(m, g.ids, o);
    EXPECT_EQ(r.tokens_scored, 14);
    EXPECT_NEAR(r.mean_nll, g.ppl_chunks_ctx8, 1e-5);
  }
  o.ubatch = 0;
  for (const char* kv : {"f16", "affine:bits=8", "kivi:bits=8", "kivi:bits=2", "turboquant_mse:bits=3",
                         "turboquant_prod:bits=3", "qjl:bits=2", "rvq:bits=2", "polar:bits=4", "rabitq:bits=2"}) {
    SCOPED_TRACE(kv);
    const kv::KVSpec s = kv::parse_kv_spec(kv, "--kv");
    o.kv = kv::uniform_kv_config(g.ck.config.n_layers, s, s);
    const PplResult r = evaluate_perplexity(m, g.ids, o, &base);
    ASSERT_TRUE(r.kld);
    EXPECT_TRUE(std::isfinite(r.mean_nll));
    EXPECT_TRUE(std::isfinite(r.kld->kld));
    if (std::string(kv).find("bits=8") != std::string::npos || std::string(kv) == "f16") {
      EXPECT_NEAR(r.mean_nll, g.ppl_chunks_ctx8, 0.05);
      EXPECT_LT(r.kld->kld, 0.01);
    }
  }
}

// convert --format hf (f32 and the source's bf16): the folder reads back to the same
// configuration and gives transformers' logits. --rotate and (for tiny-qwen3-moe, whose dense
// middle layer llama.cpp's qwen3moe cannot hold) GGUF are refused with one line (exit 2); inspect
// runs. (GGUF, mlx and bnb of a mixture of experts: tests/test_gguf_moe.cpp, test_mlx_moe.cpp,
// test_bnb_moe.cpp.)
TEST_P(TinyMoe, ConvertHfRoundTripAndRefusals) {
  Golden g = golden(GetParam());
  const std::string tmp = test::temp_dir("moe_" + GetParam());
  std::string log;
  for (const char* dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype);
    const std::string out = tmp + "/" + dtype;
    ASSERT_EQ(
        test::run_cmd(
            test::quanttool_bin() + " convert --in " + tiny(GetParam()) + " --out " + out + " --dtype " + dtype, &log),
        0)
        << log;
    Checkpoint ck = load_checkpoint(out);
    EXPECT_EQ(ck.config.n_experts, g.ck.config.n_experts);
    EXPECT_EQ(ck.config.dense_mlp, g.ck.config.dense_mlp);
    EXPECT_EQ(ck.config.norm_topk_prob, g.ck.config.norm_topk_prob);
    EXPECT_EQ(ck.tensors.size(), g.ck.tensors.size());
    EXPECT_LT(max_abs_diff(logits(ck, g.ids, "f32", false), g.logits), 1e-4);
    ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " inspect " + out, &log), 0) << log;
  }
  for (const char* args : {"--format gguf --gguf-type f16", "--scheme int8 --group-size 0 --rotate"}) {
    SCOPED_TRACE(args);
    if (GetParam() == "mixtral" && std::string(args).find("gguf") != std::string::npos) continue;
    const std::string out = tmp + "/refused" + (std::string(args).find("gguf") != std::string::npos ? ".gguf" : "");
    EXPECT_EQ(
        test::run_cmd(test::quanttool_bin() + " convert --in " + tiny(GetParam()) + " --out " + out + " " + args, &log),
        2)
        << log;
    EXPECT_NE(log.find("error:"), std::string::npos) << log;
  }
}

// compressed-tensors (int8 per channel, W8A8; int4_ct W4A16 groups of 32) and native (int4 per
// channel): every expert and attention projection quantized, the routers kept float (listed in
// compressed-tensors' "ignore", as llm-compressor's MoE recipes leave them); read back, run
// with the packed Linears. A sanity bound on the logits only (test_arch_layouts: these random
// tiny models amplify rounding, and a rounded router input may pick other experts; int4 per
// channel moves tiny-mixtral by 5.4).
TEST_P(TinyMoe, QuantizedKeepsRoutersFloat) {
  Golden g = golden(GetParam());
  const ModelConfig& c = g.ck.config;
  const std::string tmp = test::temp_dir("moe_ct_" + GetParam());
  std::string log;
  struct Case {
    const char* args;
    const char* kind;
    double tol;
  };
  int i = 0;
  for (const Case& k : {Case{"--scheme int8 --group-size 0", "compressed-tensors", 0.6},
                        Case{"--scheme int4_ct --group-size 32", "compressed-tensors", 4.0},
                        Case{"--scheme int4 --group-size 0", "native", 8.0}}) {
    SCOPED_TRACE(k.args);
    const std::string out = tmp + "/" + std::to_string(i++);
    ASSERT_EQ(test::run_cmd(
                  test::quanttool_bin() + " convert --in " + tiny(GetParam()) + " --out " + out + " " + k.args, &log),
              0)
        << log;
    Checkpoint ck = load_checkpoint(out);
    EXPECT_EQ(ck.source_kind, k.kind);
    const bool ct = std::string(k.kind) == "compressed-tensors";
    const json ignore = ct ? read_json(out + "/config.json")["quantization_config"]["ignore"] : json::array();
    int routers = 0;
    for (int l = 0; l < c.n_layers; ++l) {
      if (!c.is_moe_layer(l)) continue;
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const std::string router = p + c.desc().moe->router;
      EXPECT_FALSE(packed_weight(ck, router + ".weight")) << router;
      EXPECT_TRUE(is_float(ck.get(router + ".weight").dtype));
      if (ct) EXPECT_NE(std::find(ignore.begin(), ignore.end(), router), ignore.end()) << router;
      EXPECT_TRUE(packed_weight(ck, p + c.desc().moe->experts + ".3." + c.desc().moe->gate + ".weight"));
      ++routers;
    }
    EXPECT_GT(routers, 0);
    LlamaModel m(ck, checkpoint_linear_factory(ck, {}));
    const int n = int(g.ids.size());
    auto cache = m.make_cache(n);
    std::vector<float> got(size_t(n) * c.vocab);
    m.forward(g.ids.data(), n, 0, *cache, 0, n, got.data());
    const double d = max_abs_diff(got, g.logits);
    std::printf("tiny-%s %s max |dlogit| %.3g\n", GetParam().c_str(), k.args, d);
    EXPECT_LT(d, k.tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, TinyMoe, ::testing::Values("qwen3-moe", "mixtral"));

TEST(MoeConfig, RefusesWhatItDoesNotRun) {
  const json base = read_json(tiny("qwen3-moe") + "/config.json");
  auto refused = [&](const char* key, const json& v) {
    json j = base;
    j[key] = v;
    EXPECT_THROW(ModelConfig::from_hf_json(j, "config.json"), UserError) << key;
  };
  refused("num_experts_per_tok", 5);
  refused("num_experts_per_tok", 0);
  refused("moe_intermediate_size", 0);
  refused("mlp_only_layers", json::array({7}));
  refused("use_sliding_window", true);
  refused("decoder_sparse_step", 0);
  // decoder_sparse_step 2: layers 0 and 2 dense (and 1 already is, by mlp_only_layers)
  json j = base;
  j["decoder_sparse_step"] = 2;
  EXPECT_EQ(ModelConfig::from_hf_json(j, "c").dense_mlp, (std::vector<uint8_t>{1, 1, 1}));
  j["decoder_sparse_step"] = 1;
  j.erase("num_local_experts");
  j["num_experts"] = 4;  // the key older qwen3_moe files use
  EXPECT_EQ(ModelConfig::from_hf_json(j, "c").n_experts, 4);
}

}  // namespace
}  // namespace qt
