// convert --rotate (calib/rotation.h): the matrix is orthogonal and fixed by its seed; the rotated
// SmolLM2 computes the unrotated model's logits (the reference) up to fp32 rounding, and so does a
// rotated tiny model written to GGUF and read back; the CLI
// writes a loadable folder with the same perplexity, int4 per-channel weights lose less on it
// than on the unrotated model, and bad flag combinations exit 2 with one line.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "calib/rotation.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "tests/support.h"

namespace qt {
namespace {

TEST(Rotation, RandomOrthogonalIsOrthogonalAndFixedBySeed) {
  for (int d : {7, 64, 576}) {
    const std::vector<float> Q = calib::random_orthogonal(d, 3);
    double worst = 0, offdiag = 0;
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) {
        double s = 0;
        for (int k = 0; k < d; ++k) s += double(Q[size_t(i) * d + k]) * Q[size_t(j) * d + k];
        worst = std::max(worst, std::abs(s - (i == j)));
        if (i != j) offdiag = std::max(offdiag, std::abs(double(Q[size_t(i) * d + j])));
      }
    EXPECT_LT(worst, 2e-6) << d;                          // Q·Qᵀ = I to fp32 rounding
    EXPECT_GT(offdiag, 0.5 / std::sqrt(double(d))) << d;  // not a permutation or the identity
    EXPECT_EQ(Q, calib::random_orthogonal(d, 3));
    EXPECT_NE(Q, calib::random_orthogonal(d, 4));
  }
}

TEST(Rotation, PostNormsAreRefused) {  // a post-norm sits between a writer and the residual
  for (const char* arch : {"gemma2", "olmo2"}) {
    Checkpoint ck;
    ck.config.arch = arch;
    ck.config.hidden = 8;
    EXPECT_THROW(calib::rotate_residual(ck, 0), UserError) << arch;
  }
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) w = std::max(w, double(std::abs(a[i] - b[i])));
  return w;
}

TEST(Rotation, RotatedModelComputesTheSameLogits) {
  QT_REQUIRE_FILE(test::model_gguf());
  Checkpoint ck = load_checkpoint(test::model_gguf());
  ASSERT_TRUE(ck.config.tie_word_embeddings);
  MappedFile mf = map_file(test::data_file("wikitext-2/wiki.valid.tokens.txt"));
  std::vector<int32_t> ids = ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), 20000), true);
  const int ctx = 64;
  ids.resize(ctx);
  const std::vector<float> ref = test::fp32_logits(ck, ids, ctx);
  const std::vector<float> e0 = to_f32(ck.get("model.embed_tokens.weight"));
  calib::rotate_residual(ck, 0);
  EXPECT_FALSE(ck.config.tie_word_embeddings);
  ASSERT_TRUE(ck.has("lm_head.weight"));
  for (const char* n : {"model.norm.weight", "model.layers.7.input_layernorm.weight",
                        "model.layers.7.post_attention_layernorm.weight"}) {
    const std::vector<float> g = to_f32(ck.get(n));
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float x) { return x == 1.0f; })) << n;
  }
  // The weights really moved (a no-op would pass the logits check), and row norms are kept.
  const std::vector<float> e1 = to_f32(ck.get("model.embed_tokens.weight"));
  const int d = ck.config.hidden;
  EXPECT_GT(max_abs_diff(e0, e1), 0.05);
  double n0 = 0, n1 = 0;
  for (int i = 0; i < d; ++i)
    n0 += double(e0[size_t(100) * d + i]) * e0[size_t(100) * d + i],
        n1 += double(e1[size_t(100) * d + i]) * e1[size_t(100) * d + i];
  EXPECT_NEAR(n1, n0, 1e-4 * n0);
  const std::vector<float> got = test::fp32_logits(ck, ids, ctx);
  EXPECT_LT(max_abs_diff(got, ref), 2e-3);
}

// The values of every head turned too (v_proj rows, o_proj columns): still the same logits, and
// o_proj really changed.
TEST(Rotation, HeadRotationComputesTheSameLogits) {
  QT_REQUIRE_FILE(test::model_gguf());
  Checkpoint ck = load_checkpoint(test::model_gguf());
  MappedFile mf = map_file(test::data_file("wikitext-2/wiki.valid.tokens.txt"));
  std::vector<int32_t> ids = ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), 20000), true);
  const int ctx = 64;
  ids.resize(ctx);
  const std::vector<float> ref = test::fp32_logits(ck, ids, ctx);
  calib::rotate_residual(ck, 0);
  const std::vector<float> o1 = to_f32(ck.get("model.layers.3.self_attn.o_proj.weight"));
  calib::rotate_heads(ck, 0);
  EXPECT_GT(max_abs_diff(o1, to_f32(ck.get("model.layers.3.self_attn.o_proj.weight"))), 0.01);
  EXPECT_LT(max_abs_diff(test::fp32_logits(ck, ids, ctx), ref), 2e-3);
}

// convert --rotate --format gguf: the GGUF llama.cpp reads (norm weights ones, output.weight
// written beside the embedding, the tie broken) computes the source's logits when read back.
TEST(Rotation, RotatedGgufComputesTheSameLogits) {
  const std::string dir = test::temp_dir("rotate-gguf"), bin = test::quanttool_bin();
  for (const char* name : {"falcon3", "qwen2"}) {
    const Checkpoint src = load_checkpoint(test::tiny_dir(name));
    const std::vector<int32_t> ids = test::read_json(test::tiny_dir(name) + "/logits.json")["ids"];
    const std::string out = dir + "/" + name + ".gguf";
    std::string log;
    ASSERT_EQ(test::run_cmd(bin + " convert --in " + test::tiny_dir(name) + " --out " + out +
                                " --format gguf --gguf-type f32 --rotate --rotate-seed 5 --force",
                            &log),
              0)
        << log;
    const Checkpoint rot = load_checkpoint(out);
    EXPECT_FALSE(rot.config.tie_word_embeddings) << name;
    ASSERT_TRUE(rot.has("lm_head.weight")) << name;
    const std::vector<float> g0 = to_f32(rot.get("model.layers.0.input_layernorm.weight"));
    EXPECT_TRUE(std::all_of(g0.begin(), g0.end(), [](float x) { return x == 1.0f; })) << name;
    const int n = int(ids.size());
    const std::vector<float> ref = test::fp32_logits(src, ids, n), got = test::fp32_logits(rot, ids, n);
    EXPECT_GT(max_abs_diff(to_f32(rot.get("model.embed_tokens.weight")), to_f32(src.get("model.embed_tokens.weight"))),
              1e-3)
        << name;
    double scale = 0;
    for (float v : ref) scale = std::max(scale, double(std::abs(v)));
    std::printf("%s: max |logit difference| %.3g (max |logit| %.3g)\n", name, max_abs_diff(got, ref), scale);
    EXPECT_LT(max_abs_diff(got, ref), 1e-5 * scale + 1e-6) << name;
  }
}

std::string json_field(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  const std::string j((std::istreambuf_iterator<char>(f)), {});
  const size_t p = j.find("\"" + key + "\":");
  return p == std::string::npos ? "" : j.substr(p + key.size() + 3, 24);
}

TEST(RotationCli, SamePerplexityAndInt4LosesLessOnTheRotatedModel) {
  QT_REQUIRE_FILE(test::model_gguf());
  const std::string dir = test::temp_dir("rotate"), m = test::model_gguf(), bin = test::quanttool_bin();
  const std::string text = test::data_file("wikitext-2/wiki.test.raw");
  std::string out;
  ASSERT_EQ(test::run_cmd(bin + " convert --in " + m + " --out " + dir + "/rot --rotate --dtype f32", &out), 0) << out;
  std::map<std::string, double> ppl;
  auto eval = [&](const std::string& model, const std::string& tag) {
    ASSERT_EQ(test::run_cmd(bin + " eval-ppl --model " + model + " --text " + text + " --chunks 2 --json " + dir + "/" +
                                tag + ".json",
                            &out),
              0)
        << out;
    ppl[tag] = std::stod(json_field(dir + "/" + tag + ".json", "ppl"));
  };
  eval(m, "base");
  eval(dir + "/rot", "rot");
  EXPECT_NEAR(ppl["rot"], ppl["base"], 1e-4 * ppl["base"]);
  // W4A8 (int4 per channel, int8 per-token activations) with GPTQ on 4 chunks of calibration text,
  // the embedding and head kept: the rotated model loses much less (64 chunks: KLD 0.381 → 0.159,
  // results/calib.md §Notes, W4A8). Round-to-nearest alone does not show it: Qᵀ·W_down spreads the
  // few rows that write SmolLM2's massive residual channels over every row, which per-row int4
  // scales pay for until GPTQ compensates.
  std::ofstream(dir + "/keep-rot.json")
      << R"({"rules": [{"match": "model.embed_tokens.weight", "keep": true}, {"match": "lm_head.weight", "keep": true}]})";
  std::ofstream(dir + "/keep-base.json")
      << R"({"rules": [{"match": "model.embed_tokens.weight", "keep": true}]})";  // tied: the head too
  const std::string valid = test::data_file("wikitext-2/wiki.valid.tokens.txt");
  for (const std::string& src : {std::string("base"), std::string("rot")}) {
    const std::string in = src == "base" ? m : dir + "/rot";
    ASSERT_EQ(test::run_cmd(bin + " convert --in " + in + " --out " + dir + "/w4-" + src +
                                " --scheme int4 --group-size 0 --recipe " + dir + "/keep-" + src +
                                ".json --gptq --calib " + valid + " --calib-chunks 4",
                            &out),
              0)
        << out;
    eval(dir + "/w4-" + src, "w4-" + src);
  }
  std::printf("W4A8 GPTQ, 2 chunks: base %.4f -> %.4f, rotated %.4f -> %.4f\n", ppl["base"], ppl["w4-base"], ppl["rot"],
              ppl["w4-rot"]);
  EXPECT_LT(ppl["w4-rot"] - ppl["rot"], 0.7 * (ppl["w4-base"] - ppl["base"]))
      << ppl["w4-rot"] << " vs " << ppl["w4-base"];

  const std::string bad[] = {
      " --rotate --scheme int4 --group-size 0 --imatrix " + dir + "/x.safetensors",  // stats of the unrotated model
      " --rotate --scheme int8 --group-size 0 --smooth " + dir + "/x.safetensors",
      " --rotate-seed 3",  // needs --rotate
      " --rotate --format gguf --gguf-type q4_k_m --imatrix " + dir + "/x.safetensors",
  };
  for (const std::string& b : bad) {
    const std::string o = dir + "/bad";
    EXPECT_EQ(test::run_cmd(bin + " convert --in " + m + " --out " + o + b, &out), 2) << b << "\n" << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << b << "\n" << out;
    EXPECT_FALSE(std::filesystem::exists(o)) << b;
  }
}

}  // namespace
}  // namespace qt
