// `convert --format mlx` of a mixture of experts, against mlx_lm's own conversion of the same tiny
// folder (tests/golden/make_mlx_moe_golden.py: mlx_lm.convert of tiny-mixtral8, affine 4-bit,
// group 32, and mlx_lm's fp32 logits of it):
//  - the folder stores what mlx_lm.convert stores: the same quantized modules (each layer's
//    experts stacked into block_sparse_moe.switch_mlp.{gate,up,down}_proj [8, rows, packed], the
//    router quantized) with the same packed shapes, and no per-expert tensor;
//  - our logits of our folder equal mlx_lm's within 1e-2 (the dense layouts' bar);
//  - qwen3_moe: the experts stacked under mlp.switch_mlp; its router follows qwen3_moe.py's
//    quant_predicate (8 bits, group 64), so with a hidden size of 32 it stays float; the folder
//    reads back to the experts' own tensors and gives the logits of the same quantization written
//    per expert (--format native has no stacking: the same codes, another layout).
#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "libquant/model/llama.h"
#include "tests/support.h"

namespace qt {
namespace {

using nlohmann::json;

std::string golden(const std::string& name) { return test::source_dir() + "/tests/golden/gguf_moe/" + name; }

int qt_run(const std::string& args, std::string* out) { return test::run_cmd(test::quanttool_bin() + " " + args, out); }

// Logits from the packed weights (the quantized layouts' kernels).
std::vector<float> logits(const Checkpoint& ck, const std::vector<int32_t>& ids) {
  LlamaModel m(ck, checkpoint_linear_factory(ck, {}));
  const int n = int(ids.size());
  auto cache = m.make_cache(n);
  std::vector<float> out(size_t(n) * ck.config.vocab);
  m.forward(ids.data(), n, 0, *cache, 0, n, out.data());
  return out;
}

TEST(MlxMoe, Mixtral8IsWhatMlxLmConvertWrites) {
  const json g = test::read_json(golden("mlx_affine4_g32.json"))["mixtral8"];
  const std::string out = test::temp_dir("mlx_moe_mixtral") + "/mlx";
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + golden("tiny-mixtral8") + " --out " + out +
                       " --scheme affine --bits 4 --group-size 32 --dtype f32",
                   &log),
            0)
      << log;
  SafetensorsDir st = load_safetensors_dir(out);
  std::vector<std::string> modules;
  for (auto& [name, t] : st.tensors) {
    EXPECT_EQ(name.find(".experts."), std::string::npos) << name;
    if (name.size() > 7 && name.compare(name.size() - 7, 7, ".scales") == 0)
      modules.push_back(name.substr(0, name.size() - 7));
  }
  std::sort(modules.begin(), modules.end());
  EXPECT_EQ(modules, g["modules"].get<std::vector<std::string>>());
  for (auto& [m, shape] : g["shapes"].items())
    EXPECT_EQ(st.tensors.at(m + ".weight").shape, shape.get<std::vector<int64_t>>()) << m;

  Checkpoint ck = load_checkpoint(out);
  const std::vector<float> ours = logits(ck, g["ids"].get<std::vector<int32_t>>());
  const double d = test::max_abs_diff(ours, g["logits"].get<std::vector<float>>());
  std::printf("mixtral8 affine4 g32: max |logit diff| ours vs mlx_lm %.3g\n", d);
  EXPECT_LT(d, 1e-2);
}

TEST(MlxMoe, Qwen3MoeStackedReadsBackToTheExperts) {
  const std::string tmp = test::temp_dir("mlx_moe_qwen"), mlx = tmp + "/mlx", native = tmp + "/native";
  std::string log;
  for (auto [out, fmt] : {std::pair{mlx, "mlx"}, std::pair{native, "native"}})
    ASSERT_EQ(qt_run("convert --in " + golden("tiny-qwen3moe") + " --out " + out + " --format " + fmt +
                         " --scheme affine --bits 4 --group-size 32 --dtype f32",
                     &log),
              0)
        << log;
  SafetensorsDir st = load_safetensors_dir(mlx);
  EXPECT_EQ(st.tensors.at("model.layers.1.mlp.switch_mlp.down_proj.weight").shape, (std::vector<int64_t>{4, 32, 4}));
  EXPECT_EQ(st.tensors.at("model.layers.1.mlp.switch_mlp.up_proj.scales").shape, (std::vector<int64_t>{4, 32, 1}));
  EXPECT_EQ(st.tensors.count("model.layers.0.mlp.gate.scales"), 0u);  // 64 does not divide hidden 32
  EXPECT_EQ(st.tensors.at("model.layers.0.mlp.gate.weight").dtype, DType::F32);
  for (auto& [name, t] : st.tensors) EXPECT_EQ(name.find(".experts."), std::string::npos) << name;

  Checkpoint a = load_checkpoint(mlx), b = load_checkpoint(native);
  EXPECT_EQ(a.quantization["tensors"].size(), b.quantization["tensors"].size());
  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(int32_t((i * 37 + 11) % 64));
  EXPECT_LT(test::max_abs_diff(logits(a, ids), logits(b, ids)), 1e-5);
}

}  // namespace
}  // namespace qt
