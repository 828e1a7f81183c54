// The Gemma 2, Gemma 3 text and Falcon3 architectures through `convert` into every
// layout and back: the folder's config.json reads back to the same configuration (sliding
// layers, soft-caps, local RoPE base, scaling: what the layout's consumer needs to run it), and
// the model loaded from the folder gives transformers' fp32 logits (make_arch_logits_golden.py)
// within 1e-4 for the unquantized hf layout. Quantized layouts: a sanity bound only (these
// random tiny models amplify weight rounding: 8-bit moves their logits by 0.1–0.4, 4-bit by
// 1.5–3, measured); that the stored codes are the scheme's is test_cli_convert_quant's byte
// comparison, which does not depend on the architecture.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "libquant/model/llama.h"
#include "libquant/schemes/packed_io.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

namespace qt {
namespace {

using nlohmann::json;

std::string tiny(const std::string& name) { return test::source_dir() + "/tests/golden/logits/tiny-" + name; }

using test::read_json;

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.no_rope, b.no_rope);
  EXPECT_EQ(a.sliding, b.sliding);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.attn_softcap, b.attn_softcap);
  EXPECT_EQ(a.final_softcap, b.final_softcap);
  EXPECT_EQ(a.rope_local_theta, b.rope_local_theta);
  EXPECT_EQ(a.query_pre_attn_scalar, b.query_pre_attn_scalar);
}

struct Layout {
  const char* args;  // convert options
  const char* kind;  // load_checkpoint's source_kind of the folder
  double tol;        // max |Δlogit| against transformers' fp32
};

class ArchLayouts : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchLayouts, ConvertReadBackAndRun) {
  const std::string src = tiny(GetParam());
  const json g = read_json(src + "/logits.json");
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  const auto want = g["logits"].get<std::vector<float>>();
  const Checkpoint orig = load_checkpoint(src);
  const std::string tmp = test::temp_dir("arch_" + GetParam());
  const Layout layouts[] = {
      {"--dtype f32", "hf", 1e-4},
      {"--dtype bf16", "hf", 1e-4},  // the source's own values
      {"--scheme affine --bits 8 --group-size 32", "mlx", 0.6},
      {"--scheme affine --bits 4 --group-size 32", "mlx", 4.0},
      {"--scheme int8 --group-size 0", "compressed-tensors", 0.6},
      {"--scheme int4 --group-size 0", "native", 4.0},
      {"--scheme nf4", "bnb", 4.0},
  };
  int i = 0;
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.args);
    const std::string out = tmp + "/o" + std::to_string(i++);
    std::string log;
    ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + src + " --out " + out + " " + l.args, &log), 0)
        << log;
    Checkpoint ck = load_checkpoint(out);
    EXPECT_EQ(ck.source_kind, l.kind);
    expect_same_config(ck.config, orig.config);
    LlamaModel m(ck, checkpoint_linear_factory(ck, {}));
    const int n = int(ids.size()), V = ck.config.vocab;
    auto cache = m.make_cache(n);
    std::vector<float> got(size_t(n) * V);
    m.forward(ids.data(), n, 0, *cache, 0, n, got.data());
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k) worst = std::max(worst, double(std::abs(got[k] - want[k])));
    EXPECT_LT(worst, l.tol);
    std::printf("%s %-45s max |dlogit| %.3g\n", GetParam().c_str(), l.args, worst);
    ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " inspect " + out, &log), 0) << log;
    if (orig.config.desc().fused_proj && std::string(l.kind) != "hf") {
      // Phi-3 quantized: stored fused (qkv_proj, gate_up_proj: the names mlx_lm, vLLM and
      // transformers load), read back split; each part's codes, scales and biases are exactly
      // what quantizing that part alone gives (quantize_weights on the source's fp32 rows).
      SafetensorsDir stored = load_safetensors_dir(out);
      EXPECT_TRUE(stored.tensors.count("model.layers.0.self_attn.qkv_proj.weight"));
      EXPECT_TRUE(stored.tensors.count("model.layers.1.mlp.gate_up_proj.weight"));
      EXPECT_FALSE(stored.tensors.count("model.layers.0.self_attn.q_proj.weight"));
      int parts = 0;
      for (int layer = 0; layer < ck.config.n_layers; ++layer)
        for (const char* part :
             {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"}) {
          const std::string w = "model.layers." + std::to_string(layer) + "." + part + ".weight";
          SCOPED_TRACE(w);
          std::optional<PackedTensor> got = packed_weight(ck, w);
          ASSERT_TRUE(got);
          const Tensor& src = orig.get(w);
          std::vector<float> f(size_t(src.numel()));
          to_f32_range(src, 0, f.size(), f.data());
          const PackedTensor want = quantize_weights(f.data(), src.shape[0], src.shape[1], got->params, w);
          for (auto [a, b] :
               {std::pair{&got->data, &want.data}, {&got->scales, &want.scales}, {&got->biases, &want.biases}}) {
            ASSERT_EQ(a->nbytes, b->nbytes);
            EXPECT_EQ(0, a->nbytes ? std::memcmp(a->data, b->data, a->nbytes) : 0);
          }
          ++parts;
        }
      EXPECT_EQ(parts, 5 * ck.config.n_layers);
    }

    if (orig.config.desc().fused_proj && std::string(l.args) == "--dtype bf16") {
      // Written back fused under transformers' names: the source file's bytes, tensor for tensor.
      SafetensorsDir a = load_safetensors_dir(src), b = load_safetensors_dir(out);
      EXPECT_EQ(a.tensors.size(), b.tensors.size());
      for (auto& [name, t] : a.tensors) {
        SCOPED_TRACE(name);
        ASSERT_TRUE(b.tensors.count(name));
        const Tensor& u = b.tensors.at(name);
        EXPECT_EQ(u.shape, t.shape);
        ASSERT_EQ(u.nbytes, t.nbytes);
        EXPECT_EQ(0, std::memcmp(u.data, t.data, t.nbytes));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchLayouts,
                         ::testing::Values("gemma2", "gemma3", "falcon3", "phi3", "olmo2", "smollm3"));

}  // namespace
}  // namespace qt
