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

TEST(DecodeBench, GreedyStepsEqualTheBatchArgmax) {
  QT_REQUIRE_FILE(test::model_gguf());
  Checkpoint ck = load_checkpoint(test::model_gguf());
  std::vector<int32_t> prompt = ck.tokenizer->encode("The history of the city begins in the Roman period, when", true);
  LlamaModel model(std::move(ck), Compute::F32);
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
  for (const std::string bad :
       {" --model " + test::model_gguf() + " --prompt 0", " --model " + test::model_gguf() + " --kv-k nosuch",
        " --model " + dir + "/missing", std::string(" --prompt 8"), " --model " + test::model_gguf() + " --peak"}) {
    EXPECT_EQ(test::run_cmd(bin + bad, &out), 2) << bad << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << bad << ": " << out;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
