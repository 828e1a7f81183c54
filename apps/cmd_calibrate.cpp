// quanttool calibrate --method kv-sensitivity --model M --text wiki.valid.tokens.txt
//                     --kv METHOD[:k=v] --budget B --out recipe.json
// Measures each layer's KV sensitivity (calib/kv_sensitivity.h) with METHOD at its given bits,
// allocates bits per layer and side by reverse water-filling under the average budget B
// (calib/bit_allocation.h), and writes a recipe eval-ppl --kv-recipe takes.
// quanttool calibrate --method key-mean --model M --text wiki.valid.tokens.txt --out means.safetensors
// Averages every key per layer and kv head (calib/key_mean.h) into the file eval-ppl
// --kv-key-center takes.
// quanttool calibrate --method kv-codebook --kv METHOD[:bits=B] --model M --text wiki.valid.tokens.txt --out DIR
// Trains the tables of a calibrated KV method (calib/kv_codebook.h) into the artifacts folder
// eval-ppl --artifacts takes (apps/cmd_calibrate_kv_codebook.cpp).
// quanttool calibrate --method act-stats --model M --text wiki.valid.tokens.txt --out F [--format gguf|dat]
// Every Linear input's per-channel statistics (calib/act_stats.h), for convert --smooth / --imatrix;
// --format gguf / dat writes them as llama.cpp's imatrix file instead (calib/llama_imatrix.h), for
// llama-quantize --imatrix.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "apps/command.h"
#include "calib/act_stats.h"
#include "calib/act_stats_io.h"
#include "calib/expert_prior.h"
#include "calib/bit_allocation.h"
#include "calib/key_mean.h"
#include "calib/llama_imatrix.h"
#include "calib/kv_sensitivity.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "libquant/kv/artifacts.h"
#include "libquant/kv/codec.h"
#include "libquant/model/llama.h"
#include "libquant/parallel.h"

namespace qt {

int run_kv_codebook(const std::string& kv, const std::string& model, const std::string& text, const std::string& out,
                    int ctx, int chunks, uint64_t seed, const std::string& sides);  // cmd_calibrate_kv_codebook.cpp

namespace cmd_calibrate {

struct Options {
  std::string method, model, text, kv, out, artifacts, json_path, format;
  double budget = 0, beta = 4;
  std::vector<int> bits;
  int ctx = 512, chunks = -1, threads = 0, kv_residual = -1;
  uint64_t kv_seed = 42;
  std::string kv_sides = "both";
};

void check_text(const std::string& text) {
  if (!std::filesystem::is_regular_file(text)) user_error("{}: no such file", text);
  if (text.find("test") != std::string::npos)
    std::fprintf(stderr, "warning: %s looks like test text; calibrate on wiki.valid.tokens.txt\n", text.c_str());
}

// What the methods that only watch the model run start from: the model and the tokenized text
// (checked first: a missing text or --out folder fails before the model loads).
struct Source {
  std::unique_ptr<LlamaModel> model;
  std::vector<int32_t> ids;
  int32_t bos = -1;
};

Source open_source(const Options& o) {
  check_text(o.text);
  const auto out_dir = std::filesystem::absolute(o.out).parent_path();
  if (!std::filesystem::is_directory(out_dir)) user_error("--out {}: no folder {}", o.out, out_dir.string());
  Checkpoint ck = load_checkpoint(o.model);
  if (!ck.tokenizer) user_error("{}: the checkpoint has no tokenizer", o.model);
  MappedFile mf = map_file(o.text);
  Source s;
  s.ids = ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), mf.size), true);
  s.bos = ck.tokenizer->add_bos() ? ck.tokenizer->bos_id() : -1;
  s.model = std::make_unique<LlamaModel>(std::move(ck), checkpoint_linear_factory(ck, {}));
  return s;
}

int run_key_mean(const Options& o) {
  if (!o.kv.empty() || o.budget > 0 || !o.bits.empty())
    user_error("--method key-mean takes no --kv, --budget or --bits (they belong to kv-sensitivity)");
  Source src = open_source(o);
  LlamaModel& model = *src.model;
  const std::vector<int32_t>& ids = src.ids;
  const int32_t bos = src.bos;
  int64_t used = 0;
  const kv::KeyCenter c = calib::measure_key_mean(model, ids, o.ctx, o.chunks, bos, &used);
  kv::save_key_center(o.out, c, used, std::filesystem::path(o.text).filename().string());
  double top = 0;
  for (float x : c.mean) top = std::max(top, double(std::abs(x)));
  fmt::print(
      "key means      {} layers x {} kv heads x {}, over {} positions of {}; largest |mean| {:.3f}; written to {}\n",
      c.layers, c.kv_heads, c.head_dim, used, o.text, top, o.out);
  return 0;
}

// --method act-stats: every Linear input's per-channel absmax and mean square (calib/act_stats.h),
// for convert --smooth / --imatrix.
int run_act_stats(const Options& o) {
  if (!o.kv.empty() || o.budget > 0 || !o.bits.empty())
    user_error("--method act-stats takes no --kv, --budget or --bits (they belong to kv-sensitivity)");
  Source src = open_source(o);
  LlamaModel& model = *src.model;
  calib::ActStats s = calib::collect_act_stats(model, src.ids, o.ctx, o.chunks, src.bos);
  s.text = std::filesystem::path(o.text).filename().string();
  const std::string out_format = o.format.empty() ? "safetensors" : o.format;
  if (out_format == "gguf")
    calib::save_llama_imatrix_gguf(o.out, s, model.config(), o.ctx, int(s.tokens / o.ctx));
  else if (out_format == "dat")
    calib::save_llama_imatrix_dat(o.out, s, model.config(), int(s.tokens / o.ctx));
  else
    calib::save_act_stats(o.out, s);
  float top = 0;
  std::string top_name;
  for (auto& [name, c] : s.linears)
    for (float a : c.absmax)
      if (a > top) top = a, top_name = name;
  fmt::print("act-stats      {} Linear inputs over {} tokens of {}; largest |x| {:.2f} (input of {}); written to {}\n",
             s.linears.size(), s.tokens, o.text, top, top_name, o.out);
  if (s.experts_with_few_tokens > 0)
    fmt::print(
        "experts        {} expert inputs saw fewer than {} tokens; each expert's statistics have {} tokens of "
        "its layer's expert average added\n",
        s.experts_with_few_tokens, calib::kExpertPriorTokens, calib::kExpertPriorTokens);
  if (!o.json_path.empty()) {
    nlohmann::json j = {{"linears", s.linears.size()},     {"tokens", s.tokens}, {"text", s.text}, {"max_absmax", top},
                        {"max_absmax_input_of", top_name}, {"out", o.out}};
    const std::string t = j.dump(2) + "\n";
    write_file_atomic(o.json_path, t.data(), t.size());
  }
  return 0;
}

int run(Options o) {
  if (o.threads > 0) set_threads(o.threads);
  if (o.chunks < 0) o.chunks = o.method == "act-stats" ? 64 : o.method == "kv-codebook" ? 16 : 2;
  if (o.chunks <= 0) user_error("--chunks: must be positive, got {}", o.chunks);
  if (o.ctx <= 0) user_error("--ctx: must be positive, got {}", o.ctx);
  if (o.method == "key-mean") return run_key_mean(o);
  if (!o.format.empty() && o.method != "act-stats") user_error("--format: only for --method act-stats");
  if (!o.format.empty() && o.format != "safetensors" && o.format != "gguf" && o.format != "dat")
    user_error("--format {}: not one of safetensors, gguf (llama.cpp's imatrix), dat (its legacy imatrix)", o.format);
  if (o.method == "act-stats") return run_act_stats(o);
  if (o.method == "kv-codebook") {
    if (o.budget > 0 || !o.bits.empty() || !o.artifacts.empty())
      user_error("--method kv-codebook takes no --budget, --bits or --artifacts (give the bits in --kv METHOD:bits=B)");
    return run_kv_codebook(o.kv, o.model, o.text, o.out, o.ctx, o.chunks, o.kv_seed, o.kv_sides);
  }
  if (o.method != "kv-sensitivity")
    user_error("--method {}: not one of kv-sensitivity, key-mean, act-stats, kv-codebook", o.method);
  if (o.kv.empty()) user_error("--method kv-sensitivity: give --kv METHOD[:bits=B]");
  kv::KVSpec ref = kv::parse_kv_spec(o.kv, "--kv");
  if (ref.full_precision()) user_error("--kv {}: give a quantized method to measure with", o.kv);
  std::vector<int> allowed = o.bits;
  if (allowed.empty())
    for (double b : kv::kv_method_bits(ref.method))
      if (b == std::floor(b) && b <= 4) allowed.push_back(int(b));
  std::sort(allowed.begin(), allowed.end());
  for (int b : allowed) {
    const auto mb = kv::kv_method_bits(ref.method);
    if (std::find(mb.begin(), mb.end(), double(b)) == mb.end())
      user_error("--bits {}: {} has no {}-bit variant", b, ref.method, b);
  }
  if (!(o.budget > 0)) user_error("--budget: give the average bits per layer (e.g. 3)");
  check_text(o.text);

  Checkpoint ck = load_checkpoint(o.model);
  if (!ck.tokenizer) user_error("{}: the checkpoint has no tokenizer", o.model);
  MappedFile mf = map_file(o.text);
  const std::vector<int32_t> ids =
      ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), mf.size), true);
  calib::KvSensitivityOptions so;
  so.reference = ref;
  so.ctx = o.ctx;
  so.chunks = o.chunks;
  so.residual = o.kv_residual;
  so.seed = o.kv_seed;
  so.artifacts = o.artifacts;
  if (ck.tokenizer->add_bos()) so.bos_id = ck.tokenizer->bos_id();
  const int L = ck.config.n_layers;
  {  // the method, its parameters and the artifacts, checked before the long measurement
    kv::KVContext c;
    c.head_dim = ck.config.head_dim;
    c.seed = o.kv_seed;
    if (!o.artifacts.empty()) c.artifacts = kv::Artifacts::load(o.artifacts, c.head_dim, o.kv_seed);
    for (int b : allowed) {
      kv::KVSpec s = ref;
      s.params["bits"] = std::to_string(b);
      kv::make_codec(s, kv::Side::Key, c);
      kv::make_codec(s, kv::Side::Value, c);
    }
  }
  LlamaModel model(std::move(ck), checkpoint_linear_factory(ck, {}));
  const bool tty = isatty(fileno(stderr));
  const calib::KvSensitivity s = calib::measure_kv_sensitivity(model, ids, so, [&](int d, int t) {
    if (tty) std::fprintf(stderr, "\r\033[Kpass %d/%d", d, t), std::fflush(stderr);
    if (tty && d == t) std::fputc('\n', stderr);
  });

  // Keys and values allocated jointly: 2L "layers" under one average budget.
  std::vector<double> w = s.k;
  w.insert(w.end(), s.v.begin(), s.v.end());
  for (double& x : w) x = std::max(x, 1e-9);  // a layer the reference does not perturb at all
  const std::vector<int> b = calib::allocate_bits(w, o.budget, o.beta, allowed);
  kv::KVConfig cfg;
  for (int side = 0; side < 2; ++side)
    for (int l = 0; l < L; ++l) {
      kv::KVSpec sp = ref;
      sp.params["bits"] = std::to_string(b[size_t(side) * L + l]);
      (side == 0 ? cfg.k : cfg.v).push_back(sp);
    }
  double mean = 0;
  for (int x : b) mean += x;
  mean /= double(b.size());
  kv::write_kv_recipe(o.out, cfg,
                      fmt::format("calibrate --method kv-sensitivity --kv {} --budget {} on {} ({} chunks of {}): "
                                  "mean {:.3f} bits, beta {}",
                                  ref.text(), o.budget, o.text, o.chunks, o.ctx, mean, o.beta));
  fmt::print("sensitivity    mean KLD with one layer's side at {} ({} scored tokens, fp16-cache PPL {:.4f})\n",
             ref.text(), s.rows, s.base_ppl);
  fmt::print("{:>5}  {:>12}  {:>12}  {:>6}  {:>6}\n", "layer", "KLD keys", "KLD values", "k bits", "v bits");
  for (int l = 0; l < L; ++l)
    fmt::print("{:>5}  {:>12.6f}  {:>12.6f}  {:>6}  {:>6}\n", l, s.k[l], s.v[l], b[l], b[L + l]);
  fmt::print("budget         {} bits on average, allocated mean {:.3f}; recipe written to {}\n", o.budget, mean, o.out);
  if (!o.json_path.empty()) {
    nlohmann::json j;
    j["reference"] = ref.text();
    j["kld_keys"] = s.k;
    j["kld_values"] = s.v;
    j["bits"] = b;
    j["base_ppl"] = s.base_ppl;
    j["rows"] = s.rows;
    const std::string t = j.dump(2) + "\n";
    write_file_atomic(o.json_path, t.data(), t.size());
  }
  return 0;
}

const Registrar reg{
    {"calibrate", "calibration on text: per-layer KV sensitivities and bit budgets, key means",
     [](CLI::App& sub) -> std::function<int()> {
       auto o = std::make_shared<Options>();
       sub.add_option("--method", o->method, "kv-sensitivity, key-mean, act-stats or kv-codebook")->required();
       sub.add_option("--model", o->model, "GGUF file or Hugging Face folder")->required();
       sub.add_option("--text", o->text, "calibration text (wiki.valid.tokens.txt; never the test text)")->required();
       sub.add_option("--kv", o->kv,
                      "kv-sensitivity: KV method measured with, METHOD[:bits=B,...]; kv-codebook: the method to train");
       sub.add_option("--budget", o->budget, "kv-sensitivity: average bits per layer and side");
       sub.add_option("--bits", o->bits, "bit widths to allocate from (default: the method's 1..4)");
       sub.add_option("--beta", o->beta, "distortion decay per bit (default 4)");
       sub.add_option("--ctx", o->ctx, "tokens per chunk (default 512)");
       sub.add_option("--chunks", o->chunks, "chunks measured (default 2; act-stats 64; kv-codebook 16)");
       sub.add_option("--threads", o->threads, "threads (default: all cores)");
       sub.add_option("--kv-residual", o->kv_residual, "full-precision window, as eval-ppl");
       sub.add_option("--kv-seed", o->kv_seed, "seed of rotations and JL matrices");
       sub.add_option("--artifacts", o->artifacts, "precompute folder");
       sub.add_option("--kv-sides", o->kv_sides, "kv-codebook: train keys, values or both (default both)");
       sub.add_option("--out", o->out,
                      "recipe JSON (kv-sensitivity), key-mean safetensors or artifacts folder (kv-codebook) to write")
           ->required();
       sub.add_option("--format", o->format,
                      "act-stats: safetensors (default), gguf or dat (llama.cpp's imatrix, for llama-quantize)");
       sub.add_option("--json", o->json_path, "also write the sensitivities as JSON");
       return [o] { return run(*o); };
     }}};

}  // namespace cmd_calibrate
}  // namespace qt
