// `convert --format gguf --target-bpw B` (calib/gguf_target.h, calib/type_choice.h):
//  - choose_types: on small random sets the exact optimum found by enumerating every plan (the
//    budget is small enough for byte-exact dynamic programming), never over the budget, never
//    worse than a uniform plan that fits;
//  - a weight's sensitivity is the KL divergence of the model with that weight alone quantized,
//    recomputed here by a plain full forward of a checkpoint with the weight replaced;
//  - the CLI on a bare llama: the plan's byte count equals the 2-D weights' bytes in the file
//    written, at most B bits per weight; the saved plan re-applied with --tensor-type @FILE gives
//    the same file byte for byte, and so does a plan from saved --measurements; bad input exits 2
//    with one line.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "calib/act_stats.h"
#include "calib/act_stats_io.h"
#include "calib/gguf_target.h"
#include "calib/type_choice.h"
#include "formats/ggml_quantize.h"
#include "formats/gguf.h"
#include "libquant/eval/kld.h"
#include "tests/support.h"

namespace qt {
namespace {

using calib::TypeCandidate;

TEST(TypeChoice, MatchesExhaustiveSearch) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 2 + trial % 5, k = 2 + trial % 3;
    std::vector<std::vector<TypeCandidate>> c(static_cast<size_t>(n));
    for (auto& t : c)
      for (int j = 0; j < k; ++j) {
        // More bytes, less loss (as the types are), with noise so that hulls are not convex.
        const uint64_t bytes = uint64_t(10 + 20 * j + int(rng() % 15));
        t.push_back({bytes, std::exp(-0.1 * double(bytes)) * (1.0 + double(rng() % 100) / 50.0)});
      }
    uint64_t lo = 0, hi = 0;
    for (auto& t : c) {
      uint64_t a = ~0ull, b = 0;
      for (auto& x : t) a = std::min(a, x.bytes), b = std::max(b, x.bytes);
      lo += a, hi += b;
    }
    const uint64_t budget = lo + (hi - lo) * uint64_t(trial % 7) / 6;
    const calib::TypeChoice got = calib::choose_types(c, budget);
    ASSERT_EQ(got.pick.size(), size_t(n));
    EXPECT_LE(got.bytes, budget);
    double best = INFINITY;
    std::vector<int> idx(size_t(n), 0);
    for (;;) {
      uint64_t b = 0;
      double l = 0;
      for (int i = 0; i < n; ++i) b += c[size_t(i)][size_t(idx[size_t(i)])].bytes;
      for (int i = 0; i < n; ++i) l += c[size_t(i)][size_t(idx[size_t(i)])].loss;
      if (b <= budget) best = std::min(best, l);
      int i = 0;
      while (i < n && ++idx[size_t(i)] == k) idx[size_t(i++)] = 0;
      if (i == n) break;
    }
    EXPECT_NEAR(got.loss, best, 1e-12 * std::max(1.0, best)) << "trial " << trial;
    for (int j = 0; j < k; ++j) {  // every uniform plan that fits is no better
      uint64_t b = 0;
      double l = 0;
      for (auto& t : c) b += t[size_t(j)].bytes, l += t[size_t(j)].loss;
      if (b <= budget) {
        EXPECT_LE(got.loss, l + 1e-12);
      }
    }
  }
  EXPECT_TRUE(calib::choose_types({{{100, 1.0}}}, 99).pick.empty());  // nothing fits
}

// Large budgets are solved in rounded units: still within the budget, no worse than uniform.
TEST(TypeChoice, LargeBudgetStaysWithinAndBeatsUniform) {
  std::mt19937 rng(3);
  std::vector<std::vector<TypeCandidate>> c(200);
  for (auto& t : c) {
    const double s = 0.1 + double(rng() % 1000) / 100.0;  // sensitivity
    for (double bpw : {4.5, 5.0, 5.5, 6.0, 8.5}) {
      const uint64_t elems = 300000 + rng() % 700000;
      t.push_back({uint64_t(bpw * double(elems) / 8), s * double(elems) * std::pow(2.0, -2 * bpw)});
    }
  }
  for (size_t j = 1; j < 4; ++j) {
    uint64_t budget = 0;
    double uniform = 0;
    for (auto& t : c) budget += t[j].bytes, uniform += t[j].loss;
    const calib::TypeChoice got = calib::choose_types(c, budget);
    EXPECT_LE(got.bytes, budget);
    EXPECT_LT(got.loss, uniform);
    EXPECT_GT(got.bytes, budget - budget / 1000);  // the budget is spent
  }
}

// The probe's KLD (sensitivity × error at Q4_0) against a full forward of the model with that
// weight replaced by its Q4_0 round trip.
TEST(GgufTarget, SensitivityIsTheKldOfThatWeightAlone) {
  const std::string dir = test::source_dir() + "/tests/golden/logits/tiny-llama3";
  Checkpoint ck = load_checkpoint(dir);
  const int ctx = 32;
  std::vector<int32_t> ids(size_t(2 * ctx));
  std::mt19937 rng(5);
  for (auto& t : ids) t = int32_t(rng() % uint32_t(ck.config.vocab));
  calib::TargetOptions o;
  o.tokens = ids, o.ctx = ctx, o.chunks = 2;
  std::map<std::string, std::vector<float>> imp;
  o.importance = [&](const std::string& name, int64_t cols) -> const float* {
    auto& v = imp[name];
    if (v.empty()) {
      v = test::randn(size_t(cols), uint32_t(std::hash<std::string>{}(name)));
      for (float& x : v) x = x * x + 0.1f;
    }
    return v.data();
  };
  const std::vector<std::string> names = {"model.layers.1.self_attn.v_proj.weight",
                                          "model.layers.0.mlp.down_proj.weight", "model.embed_tokens.weight"};
  const calib::TargetPlan plan =
      calib::choose_target(calib::measure_target(ck, names, calib::gguf_target_candidates(ck), o), 6.0);
  ASSERT_EQ(plan.weights.size(), names.size());
  for (const calib::TargetWeight& w : plan.weights) {
    ASSERT_EQ(w.cands[0], "Q4_0");
    const double probe = w.sensitivity * w.err[0];
    const Tensor& t = ck.get(w.hf);
    const std::vector<float> v = to_f32(materialize(t));
    std::vector<uint8_t> q(ggml_nbytes(GgmlType::Q4_0, v.size()));
    ggml_quantize_weighted(GgmlType::Q4_0, v.data(), w.rows, w.cols, imp.at(w.hf).data(), q.data());
    std::vector<float> deq(v.size());
    ggml_dequantize(*ggml_type_row(uint32_t(GgmlType::Q4_0)), q.data(), deq.data(), v.size() / 32);
    Checkpoint alt = load_checkpoint(dir);
    alt.tensors[w.hf] = Tensor::from_f32(deq, t.shape);
    double sum = 0;
    int count = 0;
    for (int c = 0; c < 2; ++c) {
      const std::vector<int32_t> chunk(ids.begin() + c * ctx, ids.begin() + (c + 1) * ctx);
      const std::vector<float> a = test::fp32_logits(ck, chunk, ctx), b = test::fp32_logits(alt, chunk, ctx);
      const int V = ck.config.vocab;
      for (int r = ctx / 2; r < ctx - 1; ++r, ++count)
        sum +=
            kld_token(a.data() + size_t(r) * size_t(V), b.data() + size_t(r) * size_t(V), V, chunk[size_t(r + 1)]).kld;
    }
    EXPECT_GT(probe, 0) << w.hf;
    EXPECT_NEAR(probe, sum / count, 1e-3 * sum / count + 1e-9) << w.hf;
  }
}

int qt_run(const std::string& args, std::string* out) { return test::run_cmd(test::quanttool_bin() + " " + args, out); }

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(GgufTarget, PlanBytesReapplyAndBadInput) {
  const std::string src = test::source_dir() + "/tests/golden/gguf_export/kq.f32.gguf";
  const std::string dir = test::temp_dir("gguf_target");
  Checkpoint ck = load_checkpoint(src);
  calib::ActStats st;
  st.tokens = 1;
  uint32_t seed = 11;
  for (auto& [name, t] : ck.tensors) {
    if (t.shape.size() != 2) continue;
    calib::ChannelStats c;
    c.sqmean = test::randn(size_t(t.shape[1]), seed++);
    for (float& x : c.sqmean) x = x * x + 0.05f;
    c.absmax = c.sqmean;
    st.linears[name] = c;
  }
  calib::save_act_stats(dir + "/s.safetensors", st);
  for (double bpw : {3.2, 4.5, 6.0}) {
    const std::string out = dir + "/t.gguf", plan = dir + "/plan.txt", again = dir + "/r.gguf";
    std::string log;
    ASSERT_EQ(qt_run("convert --in " + src + " --out " + out + " --format gguf --force --target-bpw " +
                         std::to_string(bpw) + " --target-loss weighted-error --imatrix " + dir +
                         "/s.safetensors --save-plan " + plan + " --measurements " + dir + "/m.json",
                     &log),
              0)
        << log;
    // The plan's header: "# convert --target-bpw B: BPW bpw over the 2-D weights, BYTES bytes",
    // then "# re-apply: convert --format gguf --gguf-type T ...".
    std::ifstream f(plan);
    std::string h1, h2;
    std::getline(f, h1), std::getline(f, h2);
    const uint64_t planned = std::stoull(h1.substr(h1.rfind(", ") + 2));
    const std::string type =
        h2.substr(h2.find("--gguf-type ") + 12, h2.find(" --tensor-type") - h2.find("--gguf-type ") - 12);
    GgufFile g = GgufFile::open(out);
    uint64_t bytes = 0, elems = 0;
    for (const auto& t : g.tensors())
      if (t.ne.size() == 2) bytes += t.nbytes, elems += uint64_t(t.ne[0] * t.ne[1]);
    EXPECT_EQ(bytes, planned) << log;
    EXPECT_LE(8.0 * double(bytes), bpw * double(elems) + 1e-6);
    ASSERT_EQ(qt_run("convert --in " + src + " --out " + again + " --format gguf --force --gguf-type " + type +
                         " --tensor-type @" + plan + " --imatrix " + dir + "/s.safetensors",
                     &log),
              0)
        << log;
    EXPECT_EQ(read_all(out), read_all(again)) << bpw;
    // Measured afresh rather than read from the first run's --measurements: the same file.
    ASSERT_EQ(qt_run("convert --in " + src + " --out " + again + " --format gguf --force --target-bpw " +
                         std::to_string(bpw) + " --target-loss weighted-error --imatrix " + dir +
                         "/s.safetensors --save-plan " + dir + "/p2.txt",
                     &log),
              0)
        << log;
    EXPECT_EQ(read_all(out), read_all(again)) << bpw;
  }
  {  // --target-types: only those types in the file
    std::string log;
    ASSERT_EQ(qt_run("convert --in " + src + " --out " + dir + "/tt.gguf --format gguf --target-bpw 6 --target-loss " +
                         "weighted-error --target-types q4_0,Q8_0 --imatrix " + dir + "/s.safetensors",
                     &log),
              0)
        << log;
    int q4 = 0, q8 = 0;
    const GgufFile tt = GgufFile::open(dir + "/tt.gguf");
    for (const auto& t : tt.tensors())
      if (t.ne.size() == 2) {
        q4 += t.type == GgmlType::Q4_0, q8 += t.type == GgmlType::Q8_0;
        EXPECT_TRUE(t.type == GgmlType::Q4_0 || t.type == GgmlType::Q8_0) << t.name;
      }
    EXPECT_GT(q4, 0);
    EXPECT_GT(q8, 0);
  }
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--target-bpw 1.0 --target-loss weighted-error --imatrix " + dir + "/s.safetensors",
            "outside what the candidate types reach"},
           {"--target-bpw 20 --target-loss weighted-error --imatrix " + dir + "/s.safetensors",
            "outside what the candidate types reach"},
           {"--target-bpw 4.5 --imatrix " + dir + "/s.safetensors", "needs --calib"},
           {"--target-bpw 4.5 --target-loss weighted-error --target-types q4_0,f16 --imatrix " + dir + "/s.safetensors",
            "not a candidate"},
           {"--target-bpw 4.5 --target-loss mse --imatrix " + dir + "/s.safetensors", "neither kld nor"},
           {"--target-bpw 4.5", "needs --imatrix"},
           {"--target-bpw -1 --imatrix " + dir + "/s.safetensors", "positive"},
           {"--target-bpw 4.5 --imatrix " + dir + "/s.safetensors --tensor-type attn_v=q8_0", "give one"}}) {
    std::string log;
    EXPECT_EQ(qt_run("convert --in " + src + " --out " + dir + "/bad.gguf --format gguf " + args, &log), 2) << args;
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
    EXPECT_NE(log.find("error:"), std::string::npos) << log;
    EXPECT_NE(log.find(want), std::string::npos) << log;
    EXPECT_FALSE(std::filesystem::exists(dir + "/bad.gguf"));
  }
}

}  // namespace
}  // namespace qt
