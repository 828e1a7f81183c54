// `convert --format mlx --scheme affine --target-bpw B` (calib/mlx_target.h, calib/target_bpw.h):
//  - a weight's sensitivity is the KL divergence of the model with that weight alone at the probe
//    (affine 4-bit, its quantizer as the export's), recomputed by a plain full forward;
//  - the CLI on a tiny llama: the plan's byte count equals the quantized weights' stored bytes
//    (codes, scales, biases) in the folder written, at most B bits per weight, with more than one
//    bit width; the saved --recipe re-applied gives the same files byte for byte, and so do a
//    plan from saved --measurements and one measured afresh; bad input exits 2 with one line.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "calib/act_stats.h"
#include "calib/act_stats_io.h"
#include "calib/mlx_target.h"
#include "libquant/eval/kld.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

namespace qt {
namespace {

const std::string kTiny = "/tests/golden/logits/tiny-llama3";

TEST(MlxTarget, SensitivityIsTheKldOfThatWeightAlone) {
  const std::string dir = test::source_dir() + kTiny;
  Checkpoint ck = load_checkpoint(dir);
  const int ctx = 32;
  std::vector<int32_t> ids(size_t(2 * ctx));
  std::mt19937 rng(3);
  for (auto& t : ids) t = int32_t(rng() % uint32_t(ck.config.vocab));
  calib::TargetOptions o;
  o.tokens = ids, o.ctx = ctx, o.chunks = 2;
  const calib::WeightCalibration rtn(calib::WeightCalibArgs{});
  const calib::TargetCandidates cands = calib::mlx_target_candidates(rtn, DType::BF16);
  const std::vector<std::string> names = {"model.layers.1.self_attn.v_proj.weight",
                                          "model.layers.0.mlp.down_proj.weight", "model.embed_tokens.weight"};
  const std::vector<calib::TargetWeight> ws = calib::measure_target(ck, names, cands, o);
  ASSERT_EQ(ws.size(), names.size());
  for (const calib::TargetWeight& w : ws) {
    SchemeParams p;
    p.scheme = "affine", p.bits = 4, p.dtype = DType::BF16;
    p.group_size = w.cols % 64 == 0 ? 64 : 32;
    const auto k =
        size_t(std::find(w.cands.begin(), w.cands.end(), fmt::format("b4g{}", p.group_size)) - w.cands.begin());
    ASSERT_LT(k, w.cands.size());
    const double probe = w.sensitivity * w.err[k];
    const Tensor& t = ck.get(w.hf);
    const std::vector<float> v = to_f32(materialize(t));
    const PackedTensor q = quantize_weights(v.data(), w.rows, w.cols, p);
    EXPECT_EQ(w.bytes[k], q.bytes());
    Checkpoint alt = load_checkpoint(dir);
    alt.tensors[w.hf] = Tensor::from_f32(dequantize_weights(q), t.shape);
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

// The bytes of the quantized weights' stored tensors (MODULE.weight, .scales, .biases of every
// module with scales) in a safetensors file, and the bit widths its config.json names.
uint64_t quantized_bytes(const std::string& folder) {
  const std::string s = read_all(folder + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, s.data(), 8);
  const nlohmann::json h = nlohmann::json::parse(s.substr(8, size_t(n)));
  std::set<std::string> modules;
  for (auto& [name, e] : h.items())
    if (name.size() > 7 && name.substr(name.size() - 7) == ".scales") modules.insert(name.substr(0, name.size() - 7));
  uint64_t bytes = 0;
  for (const std::string& m : modules)
    for (const char* part : {".weight", ".scales", ".biases"}) {
      const auto& off = h.at(m + part).at("data_offsets");
      bytes += off[1].get<uint64_t>() - off[0].get<uint64_t>();
    }
  return bytes;
}

TEST(MlxTarget, PlanBytesReapplyAndBadInput) {
  const std::string src = test::source_dir() + kTiny;
  const std::string dir = test::temp_dir("mlx_target");
  Checkpoint ck = load_checkpoint(src);
  calib::ActStats st;
  st.tokens = 1;
  uint32_t seed = 5;
  uint64_t elems = 0;
  for (auto& [name, t] : ck.tensors) {
    if (t.shape.size() != 2) continue;
    calib::ChannelStats c;
    c.sqmean = test::randn(size_t(t.shape[1]), seed++);
    for (float& x : c.sqmean) x = x * x + 0.05f;
    c.absmax = c.sqmean;
    st.linears[name] = c;
    elems += uint64_t(t.shape[0] * t.shape[1]);
  }
  const std::string S = dir + "/s.safetensors";
  calib::save_act_stats(S, st);
  const std::string base = "convert --in " + src + " --format mlx --scheme affine --dtype bf16 --force ";
  for (double bpw : {3.0, 4.5, 6.0}) {
    const std::string out = dir + "/t", plan = dir + "/plan.json", again = dir + "/r";
    const std::string target = "--target-bpw " + std::to_string(bpw) + " --target-loss weighted-error --imatrix " + S;
    std::string log;
    ASSERT_EQ(
        qt_run(base + "--out " + out + " " + target + " --save-plan " + plan + " --measurements " + dir + "/m.json",
               &log),
        0)
        << log;
    // The recipe's comment: "convert --target-bpw B: BPW bpw over the 2-D weights, BYTES bytes; ...".
    const nlohmann::json recipe = nlohmann::json::parse(read_all(plan));
    const std::string c = recipe.at("comment");
    const size_t at = c.find(" bytes;");
    const uint64_t planned = std::stoull(c.substr(c.rfind(", ", at) + 2, at));
    const uint64_t bytes = quantized_bytes(out);
    EXPECT_EQ(bytes, planned) << log;
    EXPECT_EQ(recipe.at("rules").size(), 16u);  // every 2-D weight of the tiny llama, head untied
    EXPECT_LE(8.0 * double(bytes), bpw * double(elems) + 1e-6);
    EXPECT_GE(8.0 * double(bytes), (bpw - 0.5) * double(elems)) << log;
    std::set<int> widths;
    for (const auto& r : recipe.at("rules")) widths.insert(r.at("bits").get<int>());
    EXPECT_GT(widths.size(), 1u) << log;
    ASSERT_EQ(qt_run(base + "--out " + again + " --recipe " + plan + " --imatrix " + S, &log), 0) << log;
    for (const char* f : {"/model.safetensors", "/config.json"}) EXPECT_EQ(read_all(out + f), read_all(again + f)) << f;
    // From the saved measurements (the first run wrote them), then measured afresh: the same files.
    for (const std::string& m : {" --measurements " + dir + "/m.json", std::string()}) {
      ASSERT_EQ(qt_run(base + "--out " + again + " " + target + " --save-plan " + dir + "/p2.json" + m, &log), 0)
          << log;
      EXPECT_EQ(read_all(out + "/model.safetensors"), read_all(again + "/model.safetensors")) << bpw << m;
    }
    std::filesystem::remove(dir + "/m.json");
  }
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--scheme affine --target-bpw 1.0 --target-loss weighted-error", "outside what the candidate types reach"},
           {"--scheme affine --target-bpw 20 --target-loss weighted-error", "outside what the candidate types reach"},
           {"--scheme affine --target-bpw 4.5", "needs --calib"},
           {"--scheme affine --target-bpw 4.5 --target-loss weighted-error --target-types b4g64,q4_0",
            "not a candidate"},
           {"--scheme affine --target-bpw 4.5 --target-loss weighted-error --recipe q4-mix", "give one"},
           {"--scheme affine --target-bpw 4.5 --target-loss weighted-error --bits 4", "give one"},
           {"--scheme int8 --format compressed-tensors --target-bpw 4.5 --target-loss weighted-error", "--format mlx"},
           {"--scheme affine --target-bpw 4.5 --target-loss weighted-error --smooth x", "not supported"},
           {"--scheme affine --save-plan x.json", "need --target-bpw"}}) {
    std::string log;
    EXPECT_EQ(qt_run("convert --in " + src + " --out " + dir + "/bad " + args, &log), 2) << args;
    // One error line (the tiny model's "no tokenizer" warning may precede it).
    EXPECT_EQ(log.find("error:"), log.rfind("error:")) << log;
    EXPECT_NE(log.find("error:"), std::string::npos) << log;
    EXPECT_NE(log.find(want), std::string::npos) << log;
    EXPECT_FALSE(std::filesystem::exists(dir + "/bad"));
  }
}

}  // namespace
}  // namespace qt
