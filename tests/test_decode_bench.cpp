// bench --decode's generation loop: greedy tokens made one at a time through the cache are the
// ones the model predicts when the whole sequence runs as one batch (teacher forcing) — the
// single-token path, the cache appends and the positions checked against the batch path — for the
// dense f16 cache and a quantized one; and its options' errors are one line, exit 2.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "libquant/bench/decode_bench.h"
#include "libquant/kv/spec.h"
#include "libquant/model/llama.h"
#include "tests/support.h"

namespace {

using namespace qt;

// Eager: the GGUF expanded to fp32 (the dense Linears); Native: computed from its Q4_1 blocks (one
// token through the fused block dots, the batch through decoded panels).
class DecodeBench : public ::testing::TestWithParam<LoadMode> {};

TEST_P(DecodeBench, GreedyStepsEqualTheBatchArgmax) {
  QT_REQUIRE_FILE(test::model_gguf());
  Checkpoint ck = load_checkpoint(test::model_gguf(), GetParam());
  std::vector<int32_t> prompt = ck.tokenizer->encode("The history of the city begins in the Roman period, when", true);
  LlamaModel model(std::move(ck), checkpoint_linear_factory(ck, {}));
  const int gen = 12, vocab = int(model.config().vocab);
  for (const char* kv : {"f16", "kivi:bits=4"}) {
    // r=0: no full-precision window, so every generated step reads quantized keys and values.
    const kv::KVConfig kc = kv::uniform_kv_config(
        model.config().n_layers, kv::parse_kv_spec(std::string(kv) + (kv[0] == 'k' ? ",r=0" : ""), "k"),
        kv::parse_kv_spec(kv, "v"));
    auto cache = model.make_cache(int(prompt.size()) + gen, kc);
    // Prefill in batches of 5 (not a divisor of the prompt): the loop's batching is exercised too.
    const bench::DecodeResult r = bench::run_decode(model, *cache, prompt, gen, 5);
    ASSERT_EQ(int(r.generated.size()), gen);
    EXPECT_GT(r.decode_tps(), 0.0);
    if (std::string(kv) != "f16") continue;  // a quantized cache's batch and steps see different codes
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), r.generated.begin(), r.generated.end());
    auto batch_cache = model.make_cache(int(seq.size()), kc);
    std::vector<float> logits(size_t(seq.size()) * vocab);
    model.forward(seq.data(), int(seq.size()), 0, *batch_cache, 0, int(seq.size()), logits.data());
    for (int i = 0; i < gen; ++i) {
      const float* row = logits.data() + size_t(prompt.size() - 1 + i) * vocab;
      EXPECT_EQ(int32_t(std::max_element(row, row + vocab) - row), r.generated[i]) << "step " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Loads, DecodeBench, ::testing::Values(LoadMode::Eager, LoadMode::Native));

TEST(DecodeBench, CliRunsAndRefusesBadOptions) {
  QT_REQUIRE_FILE(test::model_gguf());
  const std::string bin =
      test::quanttool_bin() + " bench --decode --threads 2 --text " + test::data_file("wikitext-2/wiki.test.raw");
  const std::string dir = test::temp_dir("decode");
  std::string out;
  ASSERT_EQ(test::run_cmd(bin + " --model " + test::model_gguf() +
                              " --prompt 40 --gen 8 --kv-k kivi:bits=2 --kv-v f16 --json " + dir + "/d.json",
                          &out),
            0)
      << out;
  std::ifstream f(dir + "/d.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["prompt"], 40);
  EXPECT_EQ(j["gen"], 8);
  EXPECT_EQ(j["generated"].size(), 8u);
  EXPECT_GT(j["decode_tokens_per_second"].get<double>(), 0.0);
  // int8 tokens on the GGUF's blocks (llama.cpp's arithmetic): named in the Linears' kind.
  ASSERT_EQ(test::run_cmd(bin + " --model " + test::model_gguf() + " --prompt 16 --gen 4 --weight-act int8", &out), 0)
      << out;
  EXPECT_NE(out.find("linears gguf-q4_1-a8"), std::string::npos) << out;
  for (const std::string bad :
       {" --model " + test::model_gguf() + " --prompt 0", " --model " + test::model_gguf() + " --kv-k nosuch",
        " --model " + dir + "/missing", std::string(" --prompt 8"), " --model " + test::model_gguf() + " --peak"}) {
    EXPECT_EQ(test::run_cmd(bin + bad, &out), 2) << bad << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << bad << ": " << out;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
