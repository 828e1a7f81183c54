// Perplexity and KL divergence.
//  * chunk plans against llama-perplexity's own count for wiki.test.raw (592 chunks of 512);
//  * KLD statistics on synthetic logits against torch's kl_div, numpy's percentiles and
//    llama.cpp's uncertainty formulas (docs/spec/perplexity.md §KL divergence;
//    tests/golden/make_ppl_golden.py);
//  * both protocols on the real model against transformers running the same protocol
//    (first 4×512 tokens of wiki.test.raw; first 2048 of wiki.test.joined.txt);
//  * eval-ppl end to end: the same numbers through the CLI and our tokenizer, its JSON, and the
//    bad inputs that must exit with code 2.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/error.h"
#include "libquant/eval/kld.h"
#include "libquant/eval/perplexity.h"
#include "libquant/eval/ppl_parts.h"
#include "libquant/kv/spec.h"
#include "libquant/model/llama.h"
#include "libquant/parallel.h"
#include "tests/support.h"

namespace qt {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json load_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

std::string golden(const std::string& rel) { return test::source_dir() + "/tests/golden/" + rel; }

void expect_rel(double got, double want, double rel, const char* what) {
  EXPECT_NEAR(got, want, rel * std::abs(want)) << what;
}

// ------------------------------------------------------------------------------- plans

TEST(Plan, MatchesLlamaPerplexityChunking) {
  // llama-perplexity on wiki.test.raw with SmolLM2's tokenizer (303415 tokens) prints
  // "calculating perplexity over 592 chunks, n_ctx=512".
  ChunkPlan p = plan_chunks(PplMethod::Llama, 512, 303415, -1);
  EXPECT_EQ(p.n_chunks, 592);
  EXPECT_EQ(p.first, 256);
  EXPECT_EQ(p.n_scored, 255);
  p = plan_chunks(PplMethod::Chunks, 2048, 303415, -1);
  EXPECT_EQ(p.n_chunks, 148);
  EXPECT_EQ(p.first, 0);
  EXPECT_EQ(p.n_scored, 2047);
  EXPECT_EQ(plan_chunks(PplMethod::Llama, 512, 303415, 7).n_chunks, 7);
  EXPECT_EQ(plan_chunks(PplMethod::Llama, 512, 1024, -1).n_chunks, 2);
  EXPECT_THROW(plan_chunks(PplMethod::Llama, 512, 1023, -1), UserError);
  EXPECT_THROW(plan_chunks(PplMethod::Chunks, 2048, 0, -1), UserError);
}

// --------------------------------------------------------------------------------- KLD

uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
// The synthetic logits of make_ppl_golden.py, bit for bit.
float synth(uint32_t r, uint32_t v, uint32_t salt) {
  const uint32_t h = hash32(r * 1000003u + v * 7919u + salt);
  return (float(h >> 8) / float(1 << 23) - 1.0f) * 8.0f;
}

TEST(Kld, SyntheticMatchesTorchAndNumpy) {
  const json g = load_json(golden("ppl/kld_synthetic.json"));
  const int rows = g["rows"], V = g["vocab"];
  std::vector<float> base(V), test(V);
  KldAccumulator acc;
  for (int r = 0; r < rows; ++r) {
    for (int v = 0; v < V; ++v) {
      base[v] = synth(r, v, 1);
      test[v] = base[v] + synth(r, v, 2) * 0.125f;
    }
    KldToken t = kld_token(base.data(), test.data(), V, g["targets"][r].get<int>());
    if (r < 5) expect_rel(t.kld, g["kl_first_rows"][r].get<double>(), 1e-5, "per-token KL");
    acc.add(t);
  }
  const KldSummary s = acc.summary();
  EXPECT_EQ(s.count, rows);
  const double tol = 1e-5;
  expect_rel(s.ppl, g["ppl"], tol, "ppl");
  expect_rel(s.ppl_err, g["ppl_err"], tol, "ppl_err");
  expect_rel(s.ppl_base, g["ppl_base"], tol, "ppl_base");
  expect_rel(s.ppl_base_err, g["ppl_base_err"], tol, "ppl_base_err");
  expect_rel(s.cor, g["cor"], 1e-4, "cor");
  expect_rel(s.ln_ratio, g["ln_ratio"], 1e-4, "ln_ratio");
  expect_rel(s.ln_ratio_err, g["ln_ratio_err"], 1e-4, "ln_ratio_err");
  expect_rel(s.ratio, g["ratio"], tol, "ratio");
  expect_rel(s.ratio_err, g["ratio_err"], 1e-4, "ratio_err");
  expect_rel(s.diff, g["diff"], 1e-4, "diff");
  expect_rel(s.diff_err, g["diff_err"], 1e-4, "diff_err");
  expect_rel(s.kld, g["kld"], tol, "kld");
  expect_rel(s.kld_err, g["kld_err"], 1e-4, "kld_err");
  expect_rel(s.kld_max, g["kld_max"], tol, "kld_max");
  expect_rel(s.kld_min, g["kld_min"], tol, "kld_min");
  expect_rel(s.kld_median, g["kld_median"], tol, "kld_median");
  expect_rel(s.kld_p99, g["kld_p99"], tol, "kld_p99");
  expect_rel(s.kld_p999, g["kld_p999"], tol, "kld_p999");
  expect_rel(s.kld_p90, g["kld_p90"], tol, "kld_p90");
  expect_rel(s.kld_p10, g["kld_p10"], tol, "kld_p10");
  expect_rel(s.kld_p1, g["kld_p1"], tol, "kld_p1");
  expect_rel(s.dp, g["dp"], 1e-4, "dp");
  expect_rel(s.dp_err, g["dp_err"], 1e-4, "dp_err");
  expect_rel(s.dp_median, g["dp_median"], 1e-4, "dp_median");
  expect_rel(s.dp_p75, g["dp_p75"], 1e-4, "dp_p75");
  expect_rel(s.dp_p25, g["dp_p25"], 1e-4, "dp_p25");
  expect_rel(s.rms_dp, g["rms_dp"], tol, "rms_dp");
  expect_rel(s.rms_dp_err, g["rms_dp_err"], 1e-4, "rms_dp_err");
  EXPECT_DOUBLE_EQ(s.same_top, g["same_top"].get<double>());
  expect_rel(s.same_top_err, g["same_top_err"], 1e-9, "same_top_err");
  // The text form carries llama.cpp's labels.
  const std::string txt = format_kld_summary(s);
  EXPECT_NE(txt.find("Mean    KLD:"), std::string::npos);
  EXPECT_NE(txt.find("Same top p:"), std::string::npos);
}

TEST(Kld, LlamaCppSmallSampleRules) {
  // Fewer than 11 values: no uncertainty; fewer than 10: no covariance (llama.cpp).
  EXPECT_EQ(mean_and_uncertainty(10.0, 30.0, 10).err, 0.0);
  EXPECT_DOUBLE_EQ(mean_and_uncertainty(10.0, 30.0, 10).mean, 1.0);
  EXPECT_EQ(covariance_of_means(1, 2, 3, 9), 0.0);
  EXPECT_DOUBLE_EQ(percentile_sorted({1.f, 2.f, 3.f, 4.f}, 0.5), 2.5);
}

TEST(Kld, RefusesAnotherModelAsBaseline) {
  ModelConfig a;
  a.arch = "llama";
  a.hidden = 576;
  a.n_layers = 30;
  a.n_heads = 9;
  a.n_kv_heads = 3;
  a.head_dim = 64;
  a.intermediate = 1536;
  a.vocab = 49152;
  const std::vector<int32_t> ids{1, 2, 3}, other{1, 2, 4};
  EXPECT_NO_THROW(check_kl_baseline(a, a, "b", ids, ids));
  ModelConfig b = a;
  b.vocab = 32000;
  EXPECT_THROW(check_kl_baseline(a, b, "b", ids, ids), UserError);
  b = a;
  b.n_layers = 32;
  EXPECT_THROW(check_kl_baseline(a, b, "b", ids, ids), UserError);
  EXPECT_THROW(check_kl_baseline(a, a, "b", ids, other), UserError);
}

// ---------------------------------------------------- the real model against transformers

class SmolLMEval : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(test::model_gguf())) return;
    Checkpoint ck = load_checkpoint(test::model_gguf());
    model_ = new LlamaModel(ck, Compute::F32);
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static LlamaModel* model_;
};
LlamaModel* SmolLMEval::model_ = nullptr;

void expect_protocol(const PplResult& r, const json& g) {
  EXPECT_EQ(r.tokens_scored, g["count"].get<int64_t>());
  EXPECT_EQ(r.plan.n_chunks, g["chunks"].get<int>());
  // Acceptance bound: mean NLL within 1e-5 relative of transformers.
  expect_rel(r.mean_nll, g["mean_nll"], 1e-5, "mean NLL");
  expect_rel(r.ppl, g["ppl"], 2e-5, "PPL");
  expect_rel(r.ppl_err, g["ppl_err"], 1e-3, "PPL error");
  ASSERT_EQ(r.running.size(), g["running"].size());
  for (size_t i = 0; i < r.running.size(); ++i) expect_rel(r.running[i], g["running"][i], 2e-5, "running PPL");
  std::printf("%s: PPL %.6f ± %.6f (transformers %.6f ± %.6f)\n", ppl_method_name(r.method), r.ppl, r.ppl_err,
              g["ppl"].get<double>(), g["ppl_err"].get<double>());
}

TEST_F(SmolLMEval, LlamaProtocolMatchesTransformers) {
  QT_REQUIRE_FILE(test::model_gguf());
  const json g = load_json(golden("ppl/smollm2_q4_1_protocols.json"))["llama"];
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  PplOptions o;  // llama method, ctx 512, no BOS (SmolLM2 adds none)
  const PplResult r = evaluate_perplexity(*model_, ids, o);
  expect_protocol(r, g);
  EXPECT_EQ(r.tokens_evaluated, 4 * 512);
}

TEST_F(SmolLMEval, ChunksProtocolMatchesTransformers) {
  QT_REQUIRE_FILE(test::model_gguf());
  const json g = load_json(golden("ppl/smollm2_q4_1_protocols.json"))["chunks"];
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  PplOptions o;
  o.method = PplMethod::Chunks;
  o.ctx = 2048;
  o.max_chunks = 1;
  o.head_rows = 500;  // several output-head slices per chunk
  expect_protocol(evaluate_perplexity(*model_, ids, o), g);
}

// The model against itself: identical logits, so KL 0 and full agreement; the thread count
// does not change the result.
TEST_F(SmolLMEval, KldAgainstItselfIsZero) {
  QT_REQUIRE_FILE(test::model_gguf());
  const json g = load_json(golden("ppl/smollm2_q4_1_protocols.json"))["llama"];
  auto ids = g["ids"].get<std::vector<int32_t>>();
  ids.resize(1024);
  PplOptions o;
  o.max_chunks = 1;
  const int saved = num_threads();
  set_threads(1);
  const PplResult one = evaluate_perplexity(*model_, ids, o);
  set_threads(saved);
  LlamaModel twin(load_checkpoint(test::model_gguf()), Compute::F32);  // a second copy, its own buffers
  const PplResult r = evaluate_perplexity(*model_, ids, o, &twin);
  ASSERT_TRUE(r.kld.has_value());
  EXPECT_EQ(r.kld->kld, 0.0);
  EXPECT_EQ(r.kld->same_top, 1.0);
  EXPECT_EQ(r.kld->ratio, 1.0);
  EXPECT_DOUBLE_EQ(r.kld->ppl, r.ppl);
  EXPECT_NEAR(one.ppl, r.ppl, 1e-9 * r.ppl);
  // The evaluated model's time and the baseline's are kept apart, each within the whole.
  EXPECT_GT(r.model_seconds, 0);
  EXPECT_GT(r.base_seconds, 0);
  EXPECT_LE(r.model_seconds + r.base_seconds, r.seconds);
  EXPECT_GT(one.model_seconds, 0);
  EXPECT_EQ(one.base_seconds, 0);
}

// The baseline's hidden states kept by one run and read by the next (--kl-base-cache): the same
// KLD to the bit, without the baseline's forward. An fp16 cache against fp32, so KLD > 0.
TEST_F(SmolLMEval, KeptBaselineStatesGiveTheSameKld) {
  QT_REQUIRE_FILE(test::model_gguf());
  const json g = load_json(golden("ppl/smollm2_q4_1_protocols.json"))["llama"];
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  PplOptions o;
  o.max_chunks = 1;
  o.kv = kv::uniform_kv_config(model_->config().n_layers, kv::parse_kv_spec("f16", "k"), kv::parse_kv_spec("f16", "v"));
  LlamaModel base(load_checkpoint(test::model_gguf()), Compute::F32);
  const PplResult plain = evaluate_perplexity(*model_, ids, o, &base);
  std::vector<float> kept;
  o.base_hidden = &kept;
  const PplResult filled = evaluate_perplexity(*model_, ids, o, &base);
  EXPECT_EQ(kept.size(), size_t(filled.plan.n_scored) * model_->config().hidden);
  const PplResult reused = evaluate_perplexity(*model_, ids, o, &base);
  ASSERT_TRUE(plain.kld && filled.kld && reused.kld);
  EXPECT_GT(plain.kld->kld, 1e-7);
  EXPECT_EQ(kld_summary_json(*filled.kld), kld_summary_json(*plain.kld));
  EXPECT_EQ(kld_summary_json(*reused.kld), kld_summary_json(*plain.kld));
  EXPECT_LT(reused.base_seconds, filled.base_seconds);  // the head alone
  kept.resize(kept.size() - 1);                         // not this run's states
  EXPECT_THROW(evaluate_perplexity(*model_, ids, o, &base), UserError);
}

// Chunks scored side by side, each by its share of the threads with its own caches and scratch,
// give the bits of one chunk at a time: PPL, its error, the running values, every token's NLL and
// KLD, the baseline's kept hidden states. Forward calls shorter than a chunk, uneven teams (4
// threads over 3 chunks) and a last batch shorter than the others included; more chunks asked
// for than threads are capped.
TEST_F(SmolLMEval, ChunksSideBySideGiveTheSameBits) {
  QT_REQUIRE_FILE(test::model_gguf());
  const json g = load_json(golden("ppl/smollm2_q4_1_protocols.json"))["llama"];
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  LlamaModel base(load_checkpoint(test::model_gguf()), Compute::F32);
  PplOptions o;
  o.ctx = 64;
  o.max_chunks = 5;
  o.ubatch = 48;
  o.keep_tokens = true;
  o.kv = kv::uniform_kv_config(model_->config().n_layers, kv::parse_kv_spec("f16", "k"), kv::parse_kv_spec("f16", "v"));
  const int saved = num_threads();
  auto run = [&](int threads, int chunks_at_once, std::vector<float>* kept) {
    set_threads(threads);
    o.chunk_parallel = chunks_at_once;
    o.base_hidden = kept;
    PplResult r = evaluate_perplexity(*model_, ids, o, &base);
    set_threads(saved);
    json j = ppl_result_json(r);
    for (const char* timing :
         {"eval_seconds", "tokens_per_second", "model_eval_seconds", "model_tokens_per_second", "kl_base_eval_seconds"})
      j.erase(timing);
    return std::pair{r, j};
  };
  std::vector<float> kept_one;
  const auto [one, one_json] = run(2, 1, &kept_one);
  ASSERT_TRUE(one.kld.has_value());
  EXPECT_GT(one.kld->kld, 1e-7);
  EXPECT_EQ(one.chunk_parallel, 1);
  for (auto [threads, at_once] : {std::pair{2, 2}, std::pair{4, 3}, std::pair{2, 8}}) {
    std::vector<float> kept;
    const auto [r, j] = run(threads, at_once, &kept);
    EXPECT_EQ(r.chunk_parallel, std::min(at_once, threads)) << threads << " threads";
    EXPECT_EQ(j, one_json) << threads << " threads, " << at_once << " chunks at once";
    EXPECT_EQ(kept, kept_one) << threads << " threads, " << at_once << " chunks at once";
    EXPECT_GT(r.model_seconds, 0);
    EXPECT_GT(r.base_seconds, 0);
    EXPECT_LE(r.model_seconds + r.base_seconds, r.seconds * 1.001);
  }
  // The kept states read back by chunks side by side.
  EXPECT_EQ(run(4, 3, &kept_one).second, one_json);
}

// A run split into parts (--chunk-offset, --token-stats) and merged equals the unsplit run:
// PPL, its error, the running estimates and every KLD statistic, percentiles included. The
// model runs an fp16 cache against a second copy of itself with an fp32 cache, so the KLD is small
// but not zero.
TEST_F(SmolLMEval, SplitRunMergesToTheWholeRun) {
  QT_REQUIRE_FILE(test::model_gguf());
  const json g = load_json(golden("ppl/smollm2_q4_1_protocols.json"))["llama"];
  const auto ids = g["ids"].get<std::vector<int32_t>>();
  PplOptions o;
  o.max_chunks = 3;
  o.keep_tokens = true;
  o.kv = kv::uniform_kv_config(model_->config().n_layers, kv::parse_kv_spec("f16", "k"), kv::parse_kv_spec("f16", "v"));
  LlamaModel base(load_checkpoint(test::model_gguf()), Compute::F32);  // its own buffers
  const json whole = ppl_result_json(evaluate_perplexity(*model_, ids, o, &base));
  std::vector<json> parts;
  for (auto [off, n] : {std::pair{2, 1}, std::pair{0, 2}, std::pair{0, 1}}) {  // out of order on purpose
    o.first_chunk = off, o.max_chunks = n;
    parts.push_back(ppl_result_json(evaluate_perplexity(*model_, ids, o, &base)));
    parts.back() = json::parse(parts.back().dump());  // through text, as the files go
  }
  const json m = merge_ppl_parts({parts[0], parts[1]}, {"b", "a"});
  EXPECT_GT(whole["kld"]["kld_mean"].get<double>(), 1e-7);
  EXPECT_EQ(m["chunks"], 3);
  EXPECT_EQ(m["chunk_offset"], 0);
  EXPECT_EQ(m["tokens_scored"], whole["tokens_scored"]);
  EXPECT_EQ(m["ppl"].get<double>(), whole["ppl"].get<double>());
  EXPECT_EQ(m["ppl_err"].get<double>(), whole["ppl_err"].get<double>());
  EXPECT_EQ(m["running_ppl"], whole["running_ppl"]);
  EXPECT_EQ(m["kld"], whole["kld"]);
  EXPECT_DOUBLE_EQ(m["model_eval_seconds"].get<double>(),
                   parts[0]["model_eval_seconds"].get<double>() + parts[1]["model_eval_seconds"].get<double>());
  EXPECT_GT(m["kl_base_eval_seconds"].get<double>(), 0);
  // A gap, an overlap or another cache refuses.
  EXPECT_THROW(merge_ppl_parts({parts[0], parts[2]}, {"b", "c"}), UserError);  // chunk 1 missing
  EXPECT_THROW(merge_ppl_parts({parts[1], parts[1]}, {"a", "a"}), UserError);
  json other = parts[0];
  other["kv_cache"] = "f32";
  EXPECT_THROW(merge_ppl_parts({other, parts[1]}, {"b", "a"}), UserError);
  json bare = parts[1];
  bare.erase("token_stats");
  EXPECT_THROW(merge_ppl_parts({bare}, {"a"}), UserError);
}

// ------------------------------------------------------------------------------ the CLI

int run_eval(const std::string& args, std::string* out) {
  return test::run_cmd(test::quanttool_bin() + " eval-ppl " + args, out);
}

// eval-ppl of the test model on `text` with `args`: its --json report (null, and a failure with
// the output, when it fails); *out: what it printed.
json eval_report(const std::string& text, const std::string& args, std::string* out) {
  const std::string dir = test::temp_dir("evalppl");
  if (run_eval("--model " + test::model_gguf() + " --text " + text + " " + args + " --json " + dir + "/r.json", out)) {
    ADD_FAILURE() << *out;
    return json();
  }
  json j = load_json(dir + "/r.json");
  fs::remove_all(dir);
  return j;
}

TEST(EvalPplCli, LlamaProtocolEndToEnd) {
  QT_REQUIRE_FILE(test::model_gguf());
  const std::string text = test::data_file("wikitext-2/wiki.test.raw");
  QT_REQUIRE_FILE(text);
  const json g = load_json(golden("ppl/smollm2_q4_1_protocols.json"))["llama"];
  std::string out;
  const json j = eval_report(text, "--chunks 4 --threads 2", &out);
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["tokens_text"].get<int64_t>(), 303415);  // llama-tokenize's count for this text
  EXPECT_EQ(j["tokens_scored"].get<int64_t>(), 1020);
  expect_rel(j["ppl"], g["ppl"], 2e-5, "PPL");
  expect_rel(j["ppl_err"], g["ppl_err"], 1e-3, "PPL error");
  EXPECT_EQ(j["threads"].get<int>(), 2);
  EXPECT_EQ(j["chunk_parallel"].get<int>(), 1);  // SmolLM2 keeps a team of 4 busy: one chunk on 2 threads
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0);
  EXPECT_GT(j["peak_rss_mib"].get<double>(), 100);
  // Q4_1 blocks: 20 bytes per 32 weights = 5 bits; the Q8_0 embedding (8.5 bits) and the fp32
  // norms lift the whole file a little above.
  EXPECT_GT(j["bits_per_weight"].get<double>(), 5.0);
  EXPECT_LT(j["bits_per_weight"].get<double>(), 6.5);
  EXPECT_NE(out.find("PPL"), std::string::npos);
}

// --kl-base-cache: written by the first run, read by the second (same KLD), rewritten when the
// chunks differ; without --kl-base-model it is refused.
TEST(EvalPplCli, KlBaseCacheFile) {
  QT_REQUIRE_FILE(test::model_gguf());
  const std::string text = test::data_file("wikitext-2/wiki.test.raw");
  QT_REQUIRE_FILE(text);
  const std::string dir = test::temp_dir("evalppl");
  const std::string m = test::model_gguf();
  auto run = [&](const std::string& chunks, const std::string& out) {
    std::string log;
    EXPECT_EQ(
        run_eval("--model " + m + " --text " + text + " --chunks " + chunks + " --threads 2 --kv f16 --kl-base-model " +
                     m + " --kl-base-cache " + dir + "/base.bin --json " + dir + "/" + out,
                 &log),
        0)
        << log;
    return load_json(dir + "/" + out);
  };
  const json a = run("1", "a.json"), b = run("1", "b.json"), c = run("2", "c.json");
  EXPECT_EQ(a["kl_base_cache"], "written");
  EXPECT_EQ(b["kl_base_cache"], "read");
  EXPECT_EQ(c["kl_base_cache"], "written");
  EXPECT_EQ(a["kld"], b["kld"]);
  EXPECT_GT(a["kld"]["kld_mean"].get<double>(), 0);
  EXPECT_GT(b["model_tokens_per_second"].get<double>(), 0);
  std::string log;
  EXPECT_EQ(run_eval("--model " + m + " --text " + text + " --kl-base-cache " + dir + "/x.bin", &log), 2);
  EXPECT_NE(log.find("--kl-base-model"), std::string::npos) << log;
  fs::remove_all(dir);
}

TEST(EvalPplCli, ChunksProtocolEndToEnd) {
  QT_REQUIRE_FILE(test::model_gguf());
  const std::string text = test::data_file("wikitext-2/wiki.test.joined.txt");
  QT_REQUIRE_FILE(text);
  const json g = load_json(golden("ppl/smollm2_q4_1_protocols.json"))["chunks"];
  std::string out;
  const json j = eval_report(text, "--method chunks --chunks 1", &out);
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["ctx"].get<int>(), 2048);  // the method's default
  expect_rel(j["ppl"], g["ppl"], 2e-5, "PPL");
}

TEST(EvalPplCli, BadInputExitsWithTwo) {
  QT_REQUIRE_FILE(test::model_gguf());
  const std::string dir = test::temp_dir("evalppl-bad");
  const std::string m = " --model " + test::model_gguf();
  { std::ofstream(dir + "/empty.txt"); }
  { std::ofstream(dir + "/short.txt") << "A short text of a few words only.\n"; }
  fs::create_directories(dir + "/gpt2");
  { std::ofstream(dir + "/gpt2/config.json") << R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})"; }
  const std::string wiki = test::data_file("wikitext-2/wiki.test.raw");
  struct Case {
    std::string args, says;
  } cases[] = {
      {m + " --text " + dir + "/empty.txt", "empty"},
      {m + " --text " + dir + "/short.txt", "tokens"},
      {m + " --text " + dir + "/missing.txt", "missing.txt"},
      {m + " --text " + wiki + " --ctx 9000", "context"},
      {" --model " + dir + "/gpt2 --text " + wiki, "gpt2"},
      {m + " --text " + wiki + " --kl-base-model " + golden("logits/tiny-qwen2"), "vocabulary"},
      {m + " --text " + wiki + " --compute f64", "compute"},
      {m + " --text " + wiki + " --chunk-parallel -1", "--chunk-parallel"},
  };
  for (auto& c : cases) {
    std::string out;
    EXPECT_EQ(run_eval(c.args, &out), 2) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.says), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one line: " << out;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qt
