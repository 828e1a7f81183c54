// The activation-aware scale searches (calib/scale_search.cpp, calib/scale_fold.cpp) against their
// reference algorithms restated in torch (tests/golden/make_awq_golden.py: llm-awq's scale and
// clip search, SmoothQuant's α grid under W8A8), and the folds they make against the unfolded
// model; plus convert's --awq / --alpha auto flags end to end.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "calib/act_stats.h"
#include "calib/scale_fold.h"
#include "calib/scale_search.h"
#include "formats/checkpoint.h"
#include "formats/mapped_file.h"
#include "formats/safetensors.h"
#include "libquant/model/llama.h"
#include "libquant/schemes/grid.h"
#include "tests/support.h"

namespace qt {
namespace {

struct Golden {
  SafetensorsFile f = SafetensorsFile::open(test::source_dir() + "/tests/golden/calib/awq.safetensors");
  std::vector<float> X = to_f32(f.get("X")), W = to_f32(f.get("W"));
  int64_t n = f.get("X").shape[0], cols = f.get("X").shape[1], rows = f.get("W").shape[0];
  float scalar(const char* name) { return to_f32(f.get(name))[0]; }
};

SchemeParams params(const char* scheme, int group) {
  SchemeParams p = default_params(scheme);
  p.group_size = group;
  p.dtype = DType::F32;
  return p;
}

std::vector<double> grid_of(int n) {
  std::vector<double> a;
  for (int i = 0; i < n; ++i) a.push_back(i / 20.0);
  return a;
}

// AWQ's scale search and clip search on one Linear (int4, groups of 128) give the reference's
// ratio, scales, loss and per-group clip values.
TEST(AwqSearch, MatchesTheTorchReference) {
  Golden g;
  const SchemeGrid grid(params("int4", 128));
  std::vector<float> mean_abs(size_t(g.cols), 0.0f);
  for (int64_t t = 0; t < g.n; ++t)
    for (int64_t j = 0; j < g.cols; ++j) mean_abs[j] += std::abs(g.X[t * g.cols + j]) / float(g.n);
  calib::SearchReader r{g.W.data(), g.rows, &grid, false};
  const calib::ScaleSearchResult res = calib::search_scales(g.X.data(), g.n, g.cols, {r}, grid_of(20),
                                                            [&](double a) { return calib::awq_scales(mean_abs, a); });
  const float ref_alpha = g.scalar("awq_alpha");
  ASSERT_GT(ref_alpha, 0.0f);  // a real search: the reference did not keep s = 1
  EXPECT_NEAR(res.alpha, ref_alpha, 1e-6);
  EXPECT_NEAR(res.loss / g.scalar("awq_loss"), 1.0, 1e-3);
  EXPECT_LT(res.loss, 0.8 * res.loss_unit);
  const std::vector<float> ref_s = to_f32(g.f.get("awq_scales"));
  for (int64_t j = 0; j < g.cols; ++j) EXPECT_NEAR(res.scales[j] / ref_s[j], 1.0, 1e-4) << j;

  // Clip search in the scaled basis, as the reference runs it after scaling.
  std::vector<float> ws(g.W), xs(g.X);
  for (int64_t i = 0; i < g.rows; ++i)
    for (int64_t j = 0; j < g.cols; ++j) ws[i * g.cols + j] *= ref_s[j];
  for (int64_t t = 0; t < g.n; ++t)
    for (int64_t j = 0; j < g.cols; ++j) xs[t * g.cols + j] /= ref_s[j];
  const std::vector<float> before(ws);
  const std::vector<float> got = calib::clip_search(grid, ws.data(), g.rows, g.cols, xs.data(), g.n);
  const std::vector<float> ref = to_f32(g.f.get("clip_max"));
  ASSERT_EQ(got.size(), ref.size());
  int same = 0, clipped = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    same += std::abs(got[i] - ref[i]) <= 1e-5f * std::abs(ref[i]);
    const float* v = before.data() + (i / 2) * g.cols + (i % 2) * 128;
    float m = 0;
    for (int j = 0; j < 128; ++j) m = std::max(m, std::abs(v[j]));
    clipped += ref[i] < m;
  }
  EXPECT_GE(same, int(ref.size()) - 2);     // a near tie may fall the other way in float32
  EXPECT_GT(clipped, 10);                   // the reference clips many groups: the check is not vacuous
  for (size_t k = 0; k < ws.size(); ++k) {  // the weight is clamped to the chosen values
    const float mv = got[(k / g.cols) * 2 + (k % g.cols) / 128];
    ASSERT_LE(std::abs(ws[k]), mv);
    if (std::abs(before[k]) <= mv) {
      ASSERT_EQ(ws[k], before[k]);
    }
  }
  // A sample smaller than a group (107 tokens, 128 columns) measures the error through the
  // tokens rather than the Gram matrix: the same choices as the reference's.
  std::vector<float> ws100(before);
  const std::vector<float> got100 =
      calib::clip_search(grid, ws100.data(), g.rows, g.cols, xs.data(), g.n, 20, 0.5, 100);
  const std::vector<float> ref100 = to_f32(g.f.get("clip_max_100"));
  int same100 = 0;
  for (size_t i = 0; i < ref100.size(); ++i) same100 += std::abs(got100[i] - ref100[i]) <= 1e-5f * std::abs(ref100[i]);
  EXPECT_GE(same100, int(ref100.size()) - 2);
  EXPECT_NE(ref100, ref);  // a different sample: a different answer, so both paths are checked
}

// SmoothQuant's α grid under W8A8 (int8 per channel, int8 per token) picks the reference's α.
TEST(SmoothAlphaSearch, MatchesTheTorchReference) {
  Golden g;
  const SchemeGrid grid(params("int8", 0));
  std::vector<float> amax(size_t(g.cols), 0.0f), wmax;
  for (int64_t t = 0; t < g.n; ++t)
    for (int64_t j = 0; j < g.cols; ++j) amax[j] = std::max(amax[j], std::abs(g.X[t * g.cols + j]));
  calib::col_absmax(g.W.data(), g.rows, g.cols, wmax);
  calib::SearchReader r{g.W.data(), g.rows, &grid, true};
  const calib::ScaleSearchResult res = calib::search_scales(
      g.X.data(), g.n, g.cols, {r}, grid_of(21), [&](double a) { return calib::smooth_scales(amax, wmax, a); });
  EXPECT_NEAR(res.alpha, g.scalar("smooth_alpha"), 1e-6);
  EXPECT_NEAR(res.loss / g.scalar("smooth_loss"), 1.0, 1e-3);
  EXPECT_LT(res.loss, 0.5 * res.loss_unit);
  const std::vector<float> ref_s = to_f32(g.f.get("smooth_scales"));
  for (int64_t j = 0; j < g.cols; ++j) EXPECT_NEAR(res.scales[j] / ref_s[j], 1.0, 1e-4) << j;
}

// The searched scales fold exactly: SmolLM2 with AWQ's scales (no clipping) or SmoothQuant's
// searched α gives the unfolded model's logits up to fp32 rounding, and the weights really moved.
TEST(ScaleFold, FoldedModelComputesTheSameLogits) {
  QT_REQUIRE_FILE(test::model_gguf());
  Checkpoint ck = load_checkpoint(test::model_gguf());
  MappedFile mf = map_file(test::data_file("wikitext-2/wiki.valid.tokens.txt"));
  std::vector<int32_t> ids = ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), 20000), true);
  const int ctx = 64;
  auto logits_of = [&](const Checkpoint& c) { return test::fp32_logits(c, ids, ctx); };
  const std::vector<float> ref = logits_of(ck);
  calib::ActStats stats;
  {
    LlamaModel m(ck, Compute::F32);
    stats = calib::collect_act_stats(m, ids, ctx, 1, ck.tokenizer->bos_id());
  }
  for (const char* scheme : {"int4", "int8"}) {
    Checkpoint fc = load_checkpoint(test::model_gguf());
    std::map<std::string, SchemeParams> plan;
    for (auto& [name, t] : fc.tensors)
      if (name.find(".layers.") != std::string::npos && t.shape.size() == 2) plan[name] = params(scheme, 0);
    calib::ScaleFoldOptions o;
    o.awq = std::string(scheme) == "int4";  // int8: SmoothQuant's α searched under W8A8
    o.clip = false;
    o.stats = &stats;
    o.seq.ctx = ctx;
    o.seq.chunks = 2;
    o.seq.bos_id = ck.tokenizer->bos_id();
    const auto scales = calib::search_and_fold(fc, plan, ids, o);
    EXPECT_EQ(scales.size(), size_t(ck.config.n_layers) * 7) << scheme;
    const std::vector<float> got = logits_of(fc);
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - ref[i])));
    EXPECT_LT(worst, 2e-3) << scheme;
    int moved = 0;  // sites whose scales are not all 1
    for (auto& [name, s] : scales)
      moved += *std::max_element(s.begin(), s.end()) > 1.5f * *std::min_element(s.begin(), s.end());
    EXPECT_GT(moved, 7 * ck.config.n_layers / 2) << scheme;
    // The stored norm really changed (so the loaded model used the folded weights).
    EXPECT_NE(to_f32(fc.get("model.layers.3.input_layernorm.weight")),
              to_f32(ck.get("model.layers.3.input_layernorm.weight")));
  }
}

// convert --awq end to end: an int4 W4A8 folder with AWQ scales and clipping loads and evaluates
// below RTN's perplexity; bad combinations exit 2 with one line and write nothing.
TEST(AwqConvertCli, BeatsRtnAndRefusesBadFlags) {
  QT_REQUIRE_FILE(test::model_gguf());
  const std::string dir = test::temp_dir("awq-cli"), m = test::model_gguf(), bin = test::quanttool_bin();
  const std::string valid = test::data_file("wikitext-2/wiki.valid.tokens.txt"),
                    test_text = test::data_file("wikitext-2/wiki.test.raw");
  std::ofstream(dir + "/keep.json") << R"({"rules": [{"match": "model.embed_tokens.weight", "keep": true}]})";
  const std::string base = " --scheme int4 --group-size 0 --recipe " + dir + "/keep.json --in " + m;
  std::string out;
  std::map<std::string, double> ppl;
  for (const std::string v : {"rtn", "awq"}) {
    const std::string flags = v == "awq" ? " --awq --calib " + valid + " --search-chunks 1" : "";
    ASSERT_EQ(test::run_cmd(bin + " convert" + base + flags + " --out " + dir + "/" + v, &out), 0) << out;
    ASSERT_EQ(test::run_cmd(bin + " eval-ppl --model " + dir + "/" + v + " --text " + test_text +
                                " --chunks 2 --json " + dir + "/" + v + ".json",
                            &out),
              0)
        << out;
    std::ifstream jf(dir + "/" + v + ".json");
    const std::string j((std::istreambuf_iterator<char>(jf)), {});
    const auto p = j.find("\"ppl\":");
    ASSERT_NE(p, std::string::npos) << j;
    ppl[v] = std::stod(j.substr(p + 6));
  }
  EXPECT_LT(ppl["awq"], ppl["rtn"] * 0.9) << ppl["awq"] << " vs " << ppl["rtn"];
  const std::string bad[] = {
      " --awq",                                                       // no --calib
      " --awq --calib " + test_text,                                  // test text
      " --awq --calib " + valid + " --smooth " + dir + "/keep.json",  // two scale folds
      " --alpha auto --calib " + valid,                               // auto needs --smooth
      " --alpha fast",                                                // not a number
      " --no-clip",                                                   // needs --awq
      " --calib " + valid,                                            // nothing uses it
      " --awq --calib " + valid + " --search-chunks 0",
  };
  for (const std::string& b : bad) {
    const std::string o = dir + "/bad";
    EXPECT_EQ(test::run_cmd(bin + " convert" + base + b + " --out " + o, &out), 2) << b << "\n" << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << b << "\n" << out;
    EXPECT_FALSE(std::filesystem::exists(o)) << b;
  }
}

}  // namespace
}  // namespace qt
