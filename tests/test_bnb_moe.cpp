// `convert --format bnb` of the tiny mixtures of experts (qwen3_moe, mixtral, gpt_oss) against
// what transformers' own bitsandbytes quantization and save_pretrained write for the same models
// (tests/golden/make_bnb_moe_goldens.py): transformers replaces nn.Linear modules only, so the
// attention projections (and qwen3_moe's dense-layer MLP) are NF4/FP4 while the routers and the
// experts stay bfloat16 — per expert for qwen3_moe and mixtral, fused gate_up_proj / down_proj for
// gpt_oss, as each checkpoint names them. Every stored tensor's name, dtype, shape and bytes
// (crc32), the quant_state blobs and config.json's quantization_config equal the golden's; the
// folder read back gives the logits transformers computes from its own folder (fp32 activations)
// within 1e-4.
#include <zlib.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "libquant/model/llama.h"
#include "tests/support.h"

namespace qt {
namespace {

using nlohmann::json;

uint32_t crc_bytes(const Tensor& t) {
  return uint32_t(crc32(0, reinterpret_cast<const Bytef*>(t.data), uInt(t.nbytes)));
}

std::vector<float> packed_logits(const Checkpoint& ck, const std::vector<int32_t>& ids) {
  LlamaModel m(ck, checkpoint_linear_factory(ck, {}));
  const int n = int(ids.size());
  auto cache = m.make_cache(n);
  std::vector<float> out(size_t(n) * ck.config.vocab);
  m.forward(ids.data(), n, 0, *cache, 0, n, out.data());
  return out;
}

class BnbMoe : public ::testing::TestWithParam<std::string> {};

TEST_P(BnbMoe, FolderIsWhatTransformersWrites) {
  const json g = test::read_json(test::source_dir() + "/tests/golden/bnb_moe/" + GetParam() + ".json");
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  const std::string tmp = test::temp_dir("bnb_moe_" + GetParam());
  for (std::string type : {"nf4", "fp4"}) {
    SCOPED_TRACE(type);
    const json& want = g[type];
    const std::string out = tmp + "/" + type;
    std::string log;
    ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " convert --in " + test::tiny_dir(GetParam()) + " --out " + out +
                                " --format bnb --scheme " + type + " --group-size 64",
                            &log),
              0)
        << log;
    EXPECT_EQ(test::read_json(out + "/config.json")["quantization_config"], want["quantization_config"]);
    SafetensorsDir st = load_safetensors_dir(out);
    EXPECT_EQ(st.tensors.size(), want["tensors"].size());
    int quantized = 0;
    for (auto& [name, w] : want["tensors"].items()) {
      SCOPED_TRACE(name);
      auto it = st.tensors.find(name);
      ASSERT_NE(it, st.tensors.end());
      EXPECT_EQ(dtype_name(it->second.dtype), w["dtype"].get<std::string>());
      EXPECT_EQ(it->second.shape, w["shape"].get<std::vector<int64_t>>());
      EXPECT_EQ(crc_bytes(it->second), w["crc32"].get<uint32_t>());
      if (want["quant_state"].contains(name)) {
        const Tensor& b = it->second;
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data), b.nbytes), want["quant_state"][name]);
        ++quantized;
      }
    }
    EXPECT_GT(quantized, 0);
    Checkpoint ck = load_checkpoint(out);
    EXPECT_EQ(ck.source_kind, "bnb");
    EXPECT_EQ(int(ck.quantization["tensors"].size()), quantized);
    const double d = test::max_abs_diff(packed_logits(ck, ids), want["logits"].get<std::vector<float>>());
    std::printf("tiny-%s %s max |dlogit| vs transformers' own bnb folder %.3g\n", GetParam().c_str(), type.c_str(), d);
    EXPECT_LT(d, 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, BnbMoe, ::testing::Values("qwen3-moe", "mixtral", "gpt-oss"));

}  // namespace
}  // namespace qt
