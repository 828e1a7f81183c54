// The quantized KV cache on SmolLM2 against a golden recorded from an earlier build of it: the
// per-position NLL of one chunk through every method, both visibility modes (`cache`, `decode`),
// residual windows (KIVI R=32 G=32 with ubatch 40, not a multiple of G; R=128; R=0), key
// centering, a per-layer recipe and the dense fp16 cache must stay the same double for double.
// The golden pins the numbers so that a change of how a cache *stores* its tokens (not what it
// computes) can be proven not to change a bit.
//
// The golden (tests/golden/kv/smollm2_kv_cache_nll.json) was written by this test itself,
//   QT_KV_GOLDEN_WRITE=tests/golden/kv/smollm2_kv_cache_nll.json build/test_kv_golden
// the quantized runs at the commit that added it (before quant_cache.cpp dropped its fp32 copy
// of every position), the f16-dense runs at the commit that added them (cache.cpp as before).
// Runs use the AVX2 kernel level (the golden's; other levels round differently).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "formats/checkpoint.h"
#include "libquant/cpu_features.h"
#include "libquant/eval/perplexity.h"
#include "libquant/kv/key_center.h"
#include "libquant/model/llama.h"
#include "tests/support.h"

namespace qt {
namespace {

using namespace qt::kv;

constexpr int kCtx = 192;

struct GoldenRun {
  const char* name;
  const char* k;  // empty: the recipe
  const char* v;
  int residual;
  int ubatch;
  bool center;
};

const GoldenRun kRuns[] = {
    {"affine-4", "affine:bits=4,group=32", "affine:bits=4,group=32", -1, 40, false},
    {"kivi-2-r32", "kivi:bits=2", "kivi:bits=2", 32, 40, false},
    {"kivi-2-r128", "kivi:bits=2", "kivi:bits=2", -1, 40, false},
    {"kivi-r0", "kivi:bits=2,r=0", "kivi:bits=4,r=0", -1, 40, false},
    {"tq_mse-r16", "turboquant_mse:bits=3", "turboquant_mse:bits=2.5", 16, 40, false},
    {"tq_prod-qjl-r8", "turboquant_prod:bits=3", "qjl:bits=2", 8, 40, false},
    {"qjl-kivi", "qjl:bits=2", "kivi:bits=2", -1, 40, false},
    {"rvq-polar-r5", "rvq:bits=2,rot=dense", "polar:bits=3", 5, 40, false},
    {"tq_mse-kc", "turboquant_mse:bits=3", "turboquant_mse:bits=3", 0, 40, true},
    {"kivi-2-r32-kc", "kivi:bits=2", "kivi:bits=2", 32, 40, true},
    {"recipe", "", "", -1, 40, false},
    {"kivi-2-r32-whole", "kivi:bits=2", "kivi:bits=2", 32, 0, false},
    {"f16-dense", "f16", "f16", -1, 40, false},  // the dense fp16 cache (cache.cpp)
    {"f16-dense-whole", "f16", "f16", -1, 0, false},
};

// Per layer l, by l % 5: fp16 / f32 sides next to quantized ones, per-spec windows.
KVConfig recipe(int layers) {
  const char* kv[5][2] = {{"f16", "f16"},
                          {"kivi:bits=2", "turboquant_mse:bits=3"},
                          {"f32", "affine:bits=4,group=32"},
                          {"qjl:bits=2", "kivi:bits=2,r=32"},
                          {"turboquant_prod:bits=3,r=16", "polar:bits=3"}};
  KVConfig c;
  for (int l = 0; l < layers; ++l) {
    c.k.push_back(parse_kv_spec(kv[l % 5][0], "k"));
    c.v.push_back(parse_kv_spec(kv[l % 5][1], "v"));
  }
  return c;
}

// Means of exact small multiples of 1/4 (no libm): any vector serves to prove equality.
std::shared_ptr<const KeyCenter> synthetic_center(const ModelConfig& m) {
  auto c = std::make_shared<KeyCenter>();
  c->layers = m.n_layers, c->kv_heads = m.n_kv_heads, c->head_dim = m.head_dim;
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h)
      for (int d = 0; d < m.head_dim; ++d) c->mean.push_back(0.25f * float((l * 7 + h * 3 + d) % 11 - 5));
  return c;
}

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(KvGolden, EveryMethodAndModeBitIdenticalToTheGolden) {
  QT_REQUIRE_FILE(test::model_gguf());
  if (max_kernel_level() < KernelLevel::AVX2) {
    if (test::in_ci()) FAIL() << "the golden is at the AVX2 kernel level, which this CPU lacks";
    GTEST_SKIP() << "the golden is at the AVX2 kernel level, which this CPU lacks";
  }
  struct Level {  // the golden's level for this test, the previous one after it
    KernelLevel was = kernel_level();
    Level() { set_kernel_level(KernelLevel::AVX2); }
    ~Level() { set_kernel_level(was); }
  } level;
  const test::OneThread one_thread;
  Checkpoint ck = load_checkpoint(test::model_gguf());
  const std::vector<int32_t> tokens =
      ck.tokenizer->encode(read_all(test::data_file("wikitext-2/wiki.test.raw")).substr(0, 4000), true);
  LlamaModel model(std::move(ck), Compute::F32);
  const ModelConfig& mc = model.config();

  const char* write = std::getenv("QT_KV_GOLDEN_WRITE");
  const std::string path = test::source_dir() + "/tests/golden/kv/smollm2_kv_cache_nll.json";
  nlohmann::json golden;
  if (!write) {
    std::ifstream f(path);
    ASSERT_TRUE(f.good()) << path;
    golden = nlohmann::json::parse(f);
    ASSERT_EQ(golden["kernel_level"], "avx2");
    ASSERT_EQ(golden["ctx"], kCtx);
  } else {
    golden = {{"made_by", "QT_KV_GOLDEN_WRITE=tests/golden/kv/smollm2_kv_cache_nll.json build/test_kv_golden"},
              {"model", "SmolLM2-135M-Instruct.Q4_1.gguf, compute f32"},
              {"text", "wiki.test.raw, first 4000 bytes; method chunks, chunk 0"},
              {"kernel_level", "avx2"},
              {"ctx", kCtx},
              {"runs", nlohmann::json::object()}};
  }
  for (const GoldenRun& r : kRuns)
    for (KVMode mode : {KVMode::Cache, KVMode::Decode}) {
      PplOptions o;
      o.method = PplMethod::Chunks;
      o.ctx = kCtx;
      o.max_chunks = 1;
      o.keep_tokens = true;
      o.ubatch = r.ubatch;
      o.kv =
          *r.k ? uniform_kv_config(mc.n_layers, parse_kv_spec(r.k, "k"), parse_kv_spec(r.v, "v")) : recipe(mc.n_layers);
      o.kv.residual = r.residual;
      o.kv.mode = mode;
      if (r.center) o.kv.key_center = synthetic_center(mc);
      const PplResult res = evaluate_perplexity(model, tokens, o);
      const std::string key = std::string(r.name) + (mode == KVMode::Decode ? "/decode" : "/cache");
      std::vector<double> nll;
      for (const KldToken& t : res.tokens) nll.push_back(t.nll);
      ASSERT_EQ(nll.size(), size_t(kCtx - 1)) << key;
      if (write) {
        golden["runs"][key] = nll;
        continue;
      }
      ASSERT_TRUE(golden["runs"].contains(key)) << key;
      const std::vector<double> want = golden["runs"][key].get<std::vector<double>>();
      ASSERT_EQ(want.size(), nll.size()) << key;
      int differ = 0, first = -1;
      for (size_t i = 0; i < nll.size(); ++i)
        if (nll[i] != want[i]) differ++, first = first < 0 ? int(i) : first;
      EXPECT_EQ(differ, 0) << key << ": first at position " << first << ": " << nll[size_t(std::max(first, 0))]
                           << " vs golden " << want[size_t(std::max(first, 0))];
      std::printf("%-24s ppl %.6f\n", key.c_str(), res.ppl);
    }
  if (write) {
    std::filesystem::create_directories(std::filesystem::path(write).parent_path());
    std::ofstream f(write);  // one line per run: the diff of a changed run stays one line
    f << "{\n";
    for (auto& [k, v] : golden.items())
      if (k != "runs") f << " " << nlohmann::json(k).dump() << ": " << v.dump() << ",\n";
    f << " \"runs\": {";
    const char* sep = "\n";
    for (auto& [k, v] : golden["runs"].items())
      f << sep << "  " << nlohmann::json(k).dump() << ": " << v.dump(), sep = ",\n";
    f << "\n }\n}\n";
  }
}

}  // namespace
}  // namespace qt
