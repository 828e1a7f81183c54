// Calibration per expert of a mixture of experts, against transformers: for the tiny qwen3_moe,
// mixtral and gpt_oss (biased experts, clamped SwiGLU) models, tests/golden/make_moe_calib_golden.py
// hooks each sparse layer's experts in transformers and records, per expert, the tokens the router
// sent it and the Gram matrices of its gate/up input (the normed hidden states) and its down input,
// over the golden's 16 tokens.
// act-stats (importance) and the GPTQ pass (Hessians) must see exactly those tokens and sums, plus
// the stated prior of calib/expert_prior.h — one tiny-mixtral expert receives no token at all, and
// gets the layer's expert average rather than nothing (plain rounding).
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "calib/act_stats.h"
#include "calib/expert_prior.h"
#include "calib/sequential.h"
#include "formats/checkpoint.h"
#include "libquant/model/block_tensors.h"
#include "libquant/model/llama.h"
#include "tests/support.h"

namespace qt {
namespace {

using nlohmann::json;

struct ExpertGolden {
  int64_t tokens = 0;
  std::vector<double> gram_in, gram_down;
  std::vector<float> absmax_in;
};

struct Case {
  Checkpoint ck;
  std::vector<int32_t> ids;
  std::map<int, std::vector<ExpertGolden>> layers;  // sparse layer -> experts
};

Case load_case(const std::string& name) {
  const std::string root = test::source_dir() + "/tests/golden";
  const json g = test::read_json(root + "/moe_calib/" + name + ".json");
  Case c{load_checkpoint(root + "/logits/tiny-" + name), g["ids"].get<std::vector<int32_t>>(), {}};
  for (auto& [layer, experts] : g["layers"].items())
    for (const json& e : experts)
      c.layers[std::stoi(layer)].push_back({e["tokens"].get<int64_t>(), e["gram_in"].get<std::vector<double>>(),
                                            e["gram_down"].get<std::vector<double>>(),
                                            e["absmax_in"].get<std::vector<float>>()});
  return c;
}

// The golden sum of expert e plus the prior: kExpertPriorTokens × Σ_e' sums / Σ_e' tokens.
std::vector<double> with_prior(const std::vector<ExpertGolden>& ex, size_t e, bool down) {
  const std::vector<double>& own = down ? ex[e].gram_down : ex[e].gram_in;
  std::vector<double> mean(own.size(), 0.0);
  int64_t total = 0;
  for (const ExpertGolden& x : ex) {
    const std::vector<double>& s = down ? x.gram_down : x.gram_in;
    for (size_t i = 0; i < s.size(); ++i) mean[i] += s[i];
    total += x.tokens;
  }
  std::vector<double> r(own.size());
  for (size_t i = 0; i < own.size(); ++i) r[i] = own[i] + double(calib::kExpertPriorTokens) * mean[i] / double(total);
  return r;
}

std::string expert_weight(const ModelConfig& c, int l, size_t e, const char* proj) {
  return "model.layers." + std::to_string(l) + "." + c.desc().moe->experts + "." + std::to_string(e) + "." + proj +
         ".weight";
}

class MoeCalib : public ::testing::TestWithParam<std::string> {};

// act-stats: each expert's routed token count is transformers'; its mean x² (gate/up and down
// inputs) is (Σ over its tokens + the prior) / (its tokens + kExpertPriorTokens); an expert no token
// reached has statistics (the layer average) and the layer's largest |x| per channel.
TEST_P(MoeCalib, ActStatsPerExpertMatchTransformers) {
  Case k = load_case(GetParam());
  const ModelConfig& c = k.ck.config;
  const MoeNames& m = *c.desc().moe;
  LlamaModel model(k.ck, Compute::F32);
  const calib::ActStats s = calib::collect_act_stats(model, k.ids, int(k.ids.size()), 1, -1);
  int unreached = 0;
  for (auto& [l, ex] : k.layers) {
    for (size_t e = 0; e < ex.size(); ++e) {
      SCOPED_TRACE("layer " + std::to_string(l) + " expert " + std::to_string(e));
      const calib::ChannelStats* gate = s.find(expert_weight(c, l, e, m.gate), false);
      const calib::ChannelStats* up = s.find(expert_weight(c, l, e, m.up), false);
      const calib::ChannelStats* down = s.find(expert_weight(c, l, e, m.down), false);
      ASSERT_TRUE(gate && up && down);
      EXPECT_EQ(gate->tokens, ex[e].tokens);
      EXPECT_EQ(up->sqmean, gate->sqmean);
      const double d = double(ex[e].tokens + calib::kExpertPriorTokens);
      const std::vector<double> in = with_prior(ex, e, false), dn = with_prior(ex, e, true);
      const size_t H = gate->sqmean.size(), F = down->sqmean.size();
      ASSERT_EQ(H * H, in.size());
      ASSERT_EQ(F * F, dn.size());
      for (size_t j = 0; j < H; ++j) EXPECT_NEAR(gate->sqmean[j], in[j * H + j] / d, 1e-4 * in[j * H + j] / d + 1e-7);
      for (size_t j = 0; j < F; ++j) EXPECT_NEAR(down->sqmean[j], dn[j * F + j] / d, 1e-4 * dn[j * F + j] / d + 1e-7);
      std::vector<float> want = ex[e].absmax_in;
      if (ex[e].tokens == 0) {
        ++unreached;
        for (const ExpertGolden& x : ex)
          for (size_t j = 0; j < want.size(); ++j) want[j] = std::max(want[j], x.absmax_in[j]);
      }
      for (size_t j = 0; j < H; ++j) EXPECT_NEAR(gate->absmax[j], want[j], 1e-4 * want[j] + 1e-6);
    }
  }
  int few = 0;
  for (auto& [l, ex] : k.layers)
    for (const ExpertGolden& x : ex) few += 2 * (x.tokens < calib::kExpertPriorTokens);  // gate and down inputs
  EXPECT_EQ(s.experts_with_few_tokens, few);
  if (GetParam() == "mixtral") EXPECT_EQ(unreached, 1);  // what the golden's routing gives
}

// The GPTQ pass: every expert projection is handed its Hessian Σ xᵀx over the tokens routed to it
// (plus the prior), gate and up the same one; a rounder that keeps the weights as they are keeps the
// following blocks' inputs those of the fp32 model, as in transformers.
TEST_P(MoeCalib, GptqHessiansPerExpertMatchTransformers) {
  Case k = load_case(GetParam());
  const ModelConfig& c = k.ck.config;
  const MoeNames& m = *c.desc().moe;
  std::set<std::string> targets;
  for (int l = 0; l < c.n_layers; ++l)
    for (const std::string& p : block_projections(c, l)) targets.insert("model.layers." + std::to_string(l) + "." + p);
  std::map<std::string, std::vector<float>> seen;  // by weight name: the H it was handed
  std::map<std::string, std::string> site_of;
  calib::SequentialOptions o;
  o.ctx = int(k.ids.size());
  o.chunks = 1;
  calib::run_sequential(k.ck, targets, k.ids, o,
                        [&](const std::string& name, const std::vector<float>& w, int64_t, int64_t,
                            std::vector<float>& H, const std::string& site, bool) {
                          seen[name] = H;
                          site_of[name] = site;
                          return w;
                        });
  EXPECT_EQ(seen.size(), targets.size());
  for (auto& [l, ex] : k.layers)
    for (size_t e = 0; e < ex.size(); ++e) {
      SCOPED_TRACE("layer " + std::to_string(l) + " expert " + std::to_string(e));
      const std::string gate = expert_weight(c, l, e, m.gate), up = expert_weight(c, l, e, m.up),
                        down = expert_weight(c, l, e, m.down);
      EXPECT_EQ(site_of[gate], site_of[up]);
      EXPECT_NE(site_of[gate], site_of[down]);
      EXPECT_EQ(seen[gate], seen[up]);
      for (auto [name, is_down] : {std::pair{gate, false}, std::pair{down, true}}) {
        const std::vector<double> want = with_prior(ex, e, is_down);
        const std::vector<float>& got = seen[name];
        ASSERT_EQ(got.size(), want.size()) << name;
        double scale = 0, worst = 0;
        for (double v : want) scale = std::max(scale, std::abs(v));
        for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
        EXPECT_LT(worst, 1e-5 * scale) << name;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Archs, MoeCalib, ::testing::Values("qwen3-moe", "mixtral", "gpt-oss"));

}  // namespace
}  // namespace qt
