// The calibrated KV methods (VecInfer, SpectralQuant, CommVQ) on Gemma 2 / Gemma 3 (head_dim 256,
// sliding windows, soft-capping): calibrated on the tiny transformers-built models' own keys and
// values (random tokens), then run through the model's quantized cache against its f16 cache.
// Gemma 3's sliding layers rotate by their own RoPE base: CommVQ, which stores keys before RoPE,
// must take each layer's base back out and put it back in (KVShape::rope_of).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "calib/kv_codebook.h"
#include "formats/checkpoint.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/calibrated.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/codecs.h"
#include "libquant/model/llama.h"
#include "tests/support.h"

namespace qt {
namespace {

std::string tiny(const std::string& name) { return test::source_dir() + "/tests/golden/logits/tiny-" + name; }

std::vector<float> logits(LlamaModel& m, const std::vector<int32_t>& ids, KVCache& cache) {
  const int n = int(ids.size());
  std::vector<float> out(size_t(n) * m.config().vocab);
  cache.clear();
  m.forward(ids.data(), n, 0, cache, 0, n, out.data());
  return out;
}

// Root-mean-square logit difference over every position and vocabulary entry.
double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += double(a[i] - b[i]) * double(a[i] - b[i]);
  return std::sqrt(d / double(a.size()));
}

class KvGemma : public ::testing::TestWithParam<std::string> {};

TEST_P(KvGemma, CalibratedMethodsRunOnTheirCaches) {
  const Checkpoint ck = load_checkpoint(tiny(GetParam()));
  LlamaModel m(ck, checkpoint_linear_factory(ck, {}));
  const ModelConfig& c = m.config();
  ASSERT_EQ(c.head_dim, 256);
  const int ctx = 16;
  std::mt19937 g(5);
  std::vector<int32_t> tokens(size_t(ctx) * 48);
  for (auto& t : tokens) t = int32_t(g() % uint32_t(c.vocab));
  const calib::KvSamples s = calib::collect_kv_samples(m, tokens, ctx, 48, -1);
  EXPECT_EQ(s.rope_local.empty(), GetParam() == "gemma2");  // gemma3: two bases

  const std::string dir = test::temp_dir("kvgemma");
  struct Row {
    const char* spec;
    std::string prefix;
  };
  const std::vector<Row> rows = {
      {"commvq:bits=2,cb=4", kv::calibrated_prefix(kv::commvq_table_method(4, true), 2)},
      {"spectral:bits=2", kv::calibrated_prefix("spectral", 2)},
      {"spectral:bits=4", kv::calibrated_prefix("spectral", 4)},
      {"vecinfer:bits=2", kv::calibrated_prefix("vecinfer", 2)},
  };
  for (const Row& r : rows) {
    const kv::KVSpec spec = kv::parse_kv_spec(r.spec, "test");
    const int sides = spec.method == "commvq" ? 1 : 3;
    calib::write_calibrated_artifacts(dir, r.prefix, calib::train_kv_codebooks(s, spec, 42, sides, nullptr, {}),
                                      c.head_dim, 42, {});
  }
  std::vector<int32_t> ids(tokens.begin(), tokens.begin() + ctx);  // a calibration chunk: 16 > every window
  auto f16 = m.make_cache(ctx, "f16");
  const std::vector<float> base = logits(m, ids, *f16);
  auto run = [&](const std::string& k, const KVShape* shape = nullptr) {
    kv::KVConfig cfg = kv::uniform_kv_config(c.n_layers, kv::parse_kv_spec(k, "k"), kv::parse_kv_spec("f16", "v"));
    cfg.residual = 0;
    cfg.mode = kv::KVMode::Decode;
    cfg.artifacts = dir;
    auto cache = shape ? make_kv_cache(cfg, *shape) : m.make_cache(ctx, cfg);
    return rms_diff(logits(m, ids, *cache), base);
  };
  // More bits, closer to the f16 cache: spectral 4-bit against 2-bit keys.
  const double sp2 = run("spectral:bits=2"), sp4 = run("spectral:bits=4");
  EXPECT_LT(sp4, sp2);
  const double vi2 = run("vecinfer:bits=2");
  EXPECT_TRUE(std::isfinite(vi2));
  // CommVQ, 64 stages of 16 codewords trained on these very keys: near the f16 cache.
  const double cvq = run("commvq:bits=2,cb=4");
  std::printf("%s rms dlogit vs f16 cache: spectral-2 %.4f, spectral-4 %.4f, vecinfer-2 %.4f, commvq-2 %.4f\n",
              GetParam().c_str(), sp2, sp4, vi2, cvq);
  EXPECT_LT(cvq, sp2);
  if (GetParam() == "gemma3") {
    // The same codes decoded with the global base on the sliding layers: far off.
    KVShape wrong = m.kv_shape(ctx);
    wrong.rope_local.clear();
    const double bad = run("commvq:bits=2,cb=4", &wrong);
    std::printf("gemma3 commvq-2 with one RoPE base for every layer: %.4f\n", bad);
    EXPECT_GT(bad, 4 * cvq);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, KvGemma, ::testing::Values("gemma2", "gemma3"));

}  // namespace
}  // namespace qt
