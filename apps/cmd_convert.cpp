// quanttool convert --in MODEL --out DIR [--format hf|mlx|native] [--dtype bf16|f16|f32]
//                   [--scheme NAME [--bits B] [--group-size G] [--embedding-bits B]
//                    [--lm-head-bits B] [--recipe FILE] [--strict] [--untie]]
//                   [--imatrix STATS] [--smooth STATS [--alpha A|auto]] [--awq [--no-clip]]
//                   [--gptq [--act-order] [--calib-chunks N]] [--calib TEXT] [--search-chunks N]
//                   (calibration: calib/weight_calibration.h)
//                   [--rotate [--rotate-seed N]]  (the residual stream turned: calib/rotation.h)
// quanttool convert --in MODEL --out FILE.gguf --format gguf [--gguf-type TYPE] [--imatrix STATS]
//                   (one GGUF file for llama.cpp: run_gguf below, formats/layouts/gguf.h)
// Loads any checkpoint, quantizes its Linear weights (and embedding) when --scheme is given,
// writes it in an output layout. Quantized and cast tensors are deferred: the writer makes them
// a batch at a time as it writes each shard (docs/large-models.md), so memory does not grow
// with the model. --dtype defaults to the source's. The output is built in a temporary
// sibling folder and renamed into place at the end, so --out is either absent, the old
// contents (on error), or complete.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <chrono>
#include <exception>
#include <fstream>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "apps/command.h"
#include "calib/rotation.h"
#include "calib/weight_calibration.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/fused_proj.h"
#include "formats/layouts/bnb.h"
#include "formats/layouts/compressed_tensors.h"
#include "formats/layouts/gguf.h"
#include "formats/layouts/hf.h"
#include "formats/layouts/mlx.h"
#include "formats/layouts/native.h"
#include "formats/mapped_file.h"
#include "libquant/parallel.h"
#include "libquant/schemes/scheme.h"

namespace qt {
namespace {

namespace fs = std::filesystem;

struct ConvertOptions {
  DType dtype = DType::F32;
  uint64_t max_shard_bytes = 5'000'000'000ull;
};

// One row per output layout; later layouts (mlx, compressed-tensors, bnb, gguf) add a row, and
// quantization flags (--scheme, --bits, ...) reach their writer through ConvertOptions.
struct OutputLayout {
  const char* name;
  const char* help;
  void (*write)(const Checkpoint& ck, const std::string& dir, const ConvertOptions& opt);
};

HfWriteOptions hf_options(const ConvertOptions& opt) {
  HfWriteOptions o;
  o.dtype = opt.dtype;
  o.max_shard_bytes = opt.max_shard_bytes;
  return o;
}
void write_hf(const Checkpoint& ck, const std::string& dir, const ConvertOptions& opt) {
  write_hf_folder(ck, dir, hf_options(opt));
}
void write_mlx(const Checkpoint& ck, const std::string& dir, const ConvertOptions& opt) {
  write_mlx_folder(ck, dir, hf_options(opt));
}
void write_ct(const Checkpoint& ck, const std::string& dir, const ConvertOptions& opt) {
  write_ct_folder(ck, dir, hf_options(opt));
}
void write_bnb(const Checkpoint& ck, const std::string& dir, const ConvertOptions& opt) {
  write_bnb_folder(ck, dir, hf_options(opt));
}
void write_native(const Checkpoint& ck, const std::string& dir, const ConvertOptions& opt) {
  write_native_folder(ck, dir, hf_options(opt));
}

constexpr OutputLayout kLayouts[] = {
    {"hf", "Hugging Face folder: config.json, model.safetensors, tokenizer.json", write_hf},
    {"mlx", "mlx_lm folder: affine U32 weights + scales/biases, config.json quantization", write_mlx},
    {"native", "quanttool folder: any scheme, config.json quantization_config per tensor", write_native},
    {"compressed-tensors", "compressed-tensors int-quantized (W8A8) folder, as llm-compressor writes", write_ct},
    {"bnb", "bitsandbytes NF4/FP4 folder, as transformers saves it", write_bnb},
};

const std::map<std::string, DType> kDTypes = {{"f32", DType::F32}, {"f16", DType::F16}, {"bf16", DType::BF16}};

// "5GB" (10^9, as huggingface_hub), "500MiB" (2^20), or plain bytes.
uint64_t parse_size(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    user_error("--max-shard-size: '{}' is not a size (e.g. 5GB, 500MiB)", s);
  }
  static const std::map<std::string, double> units = {
      {"", 1},      {"B", 1},        {"KB", 1e3},     {"MB", 1e6},      {"GB", 1e9},
      {"KiB", 1024}, {"MiB", 1 << 20}, {"GiB", 1 << 30}};
  auto it = units.find(s.substr(pos));
  if (it == units.end() || !(v > 0)) user_error("--max-shard-size: '{}' is not a size (e.g. 5GB, 500MiB)", s);
  return uint64_t(v * it->second);
}

// ------------------------------------------------------------------------------ quantization
//
// Which tensors get which parameters:
//   1. the scheme's defaults, then --bits / --group-size;
//   2. the recipe's rules, in file order: every rule whose pattern matches the tensor name
//      applies, so a later rule overrides an earlier one (last match wins);
//   3. --embedding-bits (model.embed_tokens.weight) and --lm-head-bits (lm_head.weight) last:
//      a flag on the command line beats the file.
// Only 2-D ".weight" tensors (the Linear weights and the embedding) are candidates; norms and
// biases are never quantized. A candidate whose rows the group size does not divide is left
// unquantized, as mlx_lm does (--strict refuses instead).
//
// Recipe file (JSON):
//   {"rules": [
//      {"match": "model.layers.*.self_attn.*", "bits": 6},
//      {"match": "model.layers.*.mlp.*", "bits": 4},
//      {"match": "model.layers.{0,1,28,29}.*", "bits": 8, "group_size": 64},
//      {"match": "model.embed_tokens.weight", "keep": true}]}
// "match": a glob over the full HF tensor name: `*` any run of characters (dots included),
// `?` one character, `{a,b,c}` alternatives (not nested). Keys: "bits", "group_size",
// "keep" (true: leave the tensor unquantized). A rule whose pattern matches no tensor of the
// model is an error (a typo would otherwise silently do nothing).

struct QuantArgs {
  std::string scheme, recipe;
  int bits = -1, group = -1, embedding_bits = -1, lm_head_bits = -1;
  bool strict = false, untie = false;
};

// The layout each scheme goes to when --format is not given.
std::string default_format(const std::string& scheme) {
  if (scheme.empty()) return "hf";
  if (scheme == "affine") return "mlx";
  if (scheme == "int8" || scheme == "int8_ct" || scheme == "int4_ct") return "compressed-tensors";
  if (scheme == "nf4" || scheme == "fp4") return "bnb";
  return "native";
}

// Which scheme rows a layout can store; the scheme row used for `scheme` in that layout
// (compressed-tensors computes int8 its own way: the int8_ct row).
std::string scheme_row_for(const std::string& scheme, const std::string& format) {
  if (format == "hf") user_error("--scheme {}: --format hf stores unquantized weights only", scheme);
  if (format == "native") return scheme;
  if (format == "mlx" && scheme == "affine") return scheme;
  if (format == "compressed-tensors" && (scheme == "int8" || scheme == "int8_ct")) return "int8_ct";
  if (format == "compressed-tensors" && scheme == "int4_ct") return scheme;  // W4A16 pack-quantized
  if (format == "bnb" && (scheme == "nf4" || scheme == "fp4")) return scheme;
  user_error("--scheme {} cannot be written as --format {} (mlx: affine; compressed-tensors: int8, int4_ct; "
             "bnb: nf4, fp4; native: any)", scheme, format);
}

// One glob without braces: `*` and `?`.
bool glob_plain(std::string_view p, std::string_view s) {
  size_t pi = 0, si = 0, star = std::string::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi, ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++, mark = si;
    } else if (star != std::string::npos) {
      pi = star + 1, si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

bool glob_match(const std::string& p, const std::string& s) {
  size_t open = p.find('{');
  if (open == std::string::npos) return glob_plain(p, s);
  size_t close = p.find('}', open);
  if (close == std::string::npos) return glob_plain(p, s);
  const std::string head = p.substr(0, open), tail = p.substr(close + 1);
  std::string body = p.substr(open + 1, close - open - 1);
  size_t start = 0;
  while (true) {
    size_t comma = body.find(',', start);
    if (glob_match(head + body.substr(start, comma - start) + tail, s)) return true;
    if (comma == std::string::npos) return false;
    start = comma + 1;
  }
}

struct RecipeRule {
  std::string match;
  int bits = -1, group = -1;
  bool keep = false;
  int matched = 0;
};

// A recipe argument that is no file but a preset's name ("q4-mix") is recipes/NAME.json of the
// repository the binary was built in, or beside the binary (an installed copy).
std::string resolve_recipe(const std::string& arg) {
  if (fs::exists(arg) || arg.find('/') != std::string::npos || arg.find(".json") != std::string::npos) return arg;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& dir : {fs::path(QT_SOURCE_DIR) / "recipes", exe.parent_path() / "recipes",
                              exe.parent_path().parent_path() / "recipes"})
    if (fs::is_regular_file(dir / (arg + ".json"))) return (dir / (arg + ".json")).string();
  user_error("--recipe {}: no such file, nor a preset (recipes/: q4-mix, q3-mix)", arg);
}

std::vector<RecipeRule> read_recipe(const std::string& path) {
  std::ifstream f(path);
  if (!f) user_error("{}: cannot read recipe", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    std::string msg = e.what();
    if (auto p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    user_error("{}: invalid JSON: {}", path, msg);
  }
  if (!j.is_object() || !j.contains("rules") || !j["rules"].is_array())
    user_error("{}: a recipe is {{\"rules\": [{{\"match\": GLOB, \"bits\"|\"group_size\"|\"keep\": ...}}]}}", path);
  std::vector<RecipeRule> rules;
  for (auto& r : j["rules"]) {
    const size_t n = rules.size() + 1;
    if (!r.is_object() || !r.contains("match") || !r["match"].is_string())
      user_error("{}: rule {} has no \"match\" string", path, n);
    RecipeRule rule;
    rule.match = r["match"];
    for (auto& [k, v] : r.items()) {
      if (k == "match" || k == "comment") continue;
      if (k == "keep" && v.is_boolean()) rule.keep = v;
      else if (k == "bits" && v.is_number_integer()) rule.bits = v;
      else if (k == "group_size" && v.is_number_integer()) rule.group = v;
      else user_error("{}: rule {} ('{}'): unknown or mistyped key \"{}\" (bits, group_size, keep)", path, n, rule.match, k);
    }
    rules.push_back(rule);
  }
  return rules;
}

// One weight's quantization, shared by its stored tensors (codes, scales, biases): whichever the
// writer makes first runs it; each takes its part, and the packed result is dropped once all
// have. Only the writer's current batch of weights is ever held quantized.
class PackJob {
 public:
  PackJob(std::string name, Tensor source, SchemeParams p, const calib::WeightCalibration& calib, int parts)
      : name_(std::move(name)), source_(std::move(source)), p_(std::move(p)), calib_(calib), left_(parts) {}

  // Part 0: codes, 1: scales, 2: biases.
  Tensor take(int part) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!packed_ && !calib_.active()) {
      packed_ = quantize_tensor(source_, p_, name_);  // chunk by chunk, no fp32 copy of the whole
      release_pages(source_);
      source_ = Tensor{};
    }
    if (!packed_) {
      const int64_t rows = source_.shape[0], cols = source_.shape[1];
      // The fp32 copy goes into this thread's buffer, kept between weights (a fresh one per
      // weight spent a fifth of convert's time in page faults) unless it grew past 256 MB.
      thread_local std::vector<float> w;
      w.resize(size_t(rows * cols));
      to_f32_range(source_, 0, w.size(), w.data());
      release_pages(source_);
      std::optional<PackedTensor> c = calib_.quantize(name_, w.data(), rows, cols, p_);
      packed_ = c ? std::move(*c) : quantize_weights(w.data(), rows, cols, p_, name_);
      if (w.capacity() > (size_t(256) << 20) / sizeof(float)) std::vector<float>().swap(w);
      source_ = Tensor{};  // a deferred source (GGUF) is made once
    }
    Tensor& slot = part == 0 ? packed_->data : part == 1 ? packed_->scales : packed_->biases;
    Tensor r = std::move(slot);
    slot = Tensor{};
    if (--left_ == 0) packed_.reset();
    return r;
  }

 private:
  std::mutex mu_;
  std::string name_;
  Tensor source_;
  SchemeParams p_;
  const calib::WeightCalibration& calib_;
  int left_;
  std::optional<PackedTensor> packed_;
};

bool in(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

class QuantPlanner {
 public:
  QuantPlanner(const QuantArgs& a, const std::string& format) : a_(a) {
    if (a.scheme.empty()) {
      if (a.bits >= 0 || a.group >= 0 || a.embedding_bits >= 0 || a.lm_head_bits >= 0 || !a.recipe.empty() ||
          a.strict || a.untie)
        user_error("--bits, --group-size, --recipe, ...: need --scheme");
      if (format != "hf") user_error("--format {} stores quantized weights: give --scheme", format);
      return;
    }
    find_scheme(a.scheme);  // unknown scheme: one line listing the known ones
    base_ = default_params(scheme_row_for(a.scheme, format));
    if (a.bits >= 0) base_.bits = a.bits;
    if (a.group >= 0) base_.group_size = a.group;
    check_params(base_, "--bits/--group-size");
    for (int b : {a.embedding_bits, a.lm_head_bits})
      if (b >= 0) check_params(with_bits(base_, b), b == a.embedding_bits ? "--embedding-bits" : "--lm-head-bits");
    if (!a.recipe.empty()) {
      a_.recipe = resolve_recipe(a.recipe);
      rules_ = read_recipe(a_.recipe);
      for (size_t i = 0; i < rules_.size(); ++i) {
        SchemeParams p = base_;
        if (rules_[i].bits >= 0) p.bits = rules_[i].bits;
        if (rules_[i].group >= 0) p.group_size = rules_[i].group;
        check_params(p, fmt::format("{}: rule {} ('{}')", a.recipe, i + 1, rules_[i].match));
      }
    }
    active_ = true;
  }
  bool active() const { return active_; }
  // The dtype of the source weights and of the scales the layouts store in it (--dtype).
  void set_dtype(DType d) { base_.dtype = d; }

  // The packed checkpoint the writer takes: quantized weights under the layout's names, the
  // rest as loaded, and the normalized description in `quantization`.
  Checkpoint quantize(Checkpoint ck, const std::string& format, calib::WeightCalibration& calib) {
    const bool tied = ck.config.tie_word_embeddings;
    if (a_.lm_head_bits >= 0 && tied && !a_.untie)
      user_error("--lm-head-bits: {} ties lm_head to the embedding; add --untie to write a separate "
                 "lm_head.weight, or use --embedding-bits", ck.path);
    if (tied && a_.untie) {
      ck.tensors["lm_head.weight"] = ck.get("model.embed_tokens.weight");  // shares the storage
      ck.config.tie_word_embeddings = false;
    }
    std::map<std::string, std::optional<SchemeParams>> plan;
    std::map<std::string, std::string> skipped;
    for (auto& [name, t] : ck.tensors) {
      for (auto& r : rules_)
        if (glob_match(r.match, name)) ++r.matched;
      if (t.shape.size() != 2 || module_of(name) == name) continue;  // norms, biases
      // llm-compressor's W8A8 preset targets Linear layers and ignores lm_head.
      if (format == "compressed-tensors" && (name == "model.embed_tokens.weight" || name == "lm_head.weight")) {
        skipped[name] = "compressed-tensors quantizes Linear layers only (lm_head ignored)";
        continue;
      }
      // transformers' bitsandbytes integration keeps the embedding and the output head float.
      if (format == "bnb" && (name == "model.embed_tokens.weight" || name == "lm_head.weight")) {
        skipped[name] = "bitsandbytes (transformers) keeps the embedding and lm_head unquantized";
        continue;
      }
      SchemeParams p = base_;
      bool keep = false;
      for (size_t i = 0; i < rules_.size(); ++i) {
        const RecipeRule& r = rules_[i];
        if (!glob_match(r.match, name)) continue;
        keep = r.keep;
        if (r.bits >= 0) p.bits = r.bits;
        if (r.group >= 0) p.group_size = r.group;
        if (keep) skipped[name] = fmt::format("kept by recipe rule {} ('{}')", i + 1, r.match);
      }
      if (name == "model.embed_tokens.weight" && a_.embedding_bits >= 0) p.bits = a_.embedding_bits, keep = false;
      if (name == "lm_head.weight" && a_.lm_head_bits >= 0) p.bits = a_.lm_head_bits, keep = false;
      if (keep) continue;
      skipped.erase(name);
      std::string why;
      if (!scheme_fits(p, t.shape[0], t.shape[1], &why)) {
        if (a_.strict) user_error("--strict: {} [{}, {}]: {}", name, t.shape[0], t.shape[1], why);
        skipped[name] = why;
        continue;
      }
      plan[name] = p;
    }
    for (size_t i = 0; i < rules_.size(); ++i)
      if (!rules_[i].matched)
        user_error("{}: rule {} ('{}') matches no tensor of {}", a_.recipe, i + 1, rules_[i].match, ck.path);
    if (plan.empty())
      user_error("--group-size {}: quantizes no tensor of {} ({})", base_.group_size, ck.path,
                 skipped.empty() ? "no 2-D weights" : skipped.begin()->second);

    if (calib.active()) {
      std::map<std::string, SchemeParams> flat;
      for (auto& [name, p] : plan) flat[name] = *p;
      calib.run(ck, flat);
    }
    QuantEntry (*names)(const std::string&) = format == "mlx"                  ? mlx_tensor_names
                                              : format == "compressed-tensors" ? ct_tensor_names
                                              : format == "bnb"                ? bnb_tensor_names
                                                                               : native_tensor_names;
    nlohmann::json desc = {{"format", format}, {"tensors", nlohmann::json::object()}, {"skipped", skipped}};
    std::map<std::string, int> by_params;
    for (auto& [name, p] : plan) {
      const Tensor& t = ck.tensors.at(name);
      QuantEntry q = names(name);
      q.scheme = p->scheme;
      q.bits = p->bits;
      q.group_size = p->group_size;
      q.dtype = p->dtype;
      q.rows = t.shape[0];
      q.cols = t.shape[1];
      const PackedLayout lay = packed_layout(*p, q.rows, q.cols);
      if (!lay.biases) q.biases.clear();
      // Deferred: the weight is quantized when the writer reaches the first of its stored tensors.
      auto job = std::make_shared<PackJob>(name, t, *p, calib, lay.biases ? 3 : 2);
      ck.tensors.erase(name);
      auto part = [&](const TensorSpec& spec, int k) {
        return deferred_tensor(spec.dtype, spec.shape, [job, k] { return job->take(k); });
      };
      if (q.scheme == "int4_ct") {  // pack-quantized: int32 codes beside the weight's shape
        q.data = module_of(name) + ".weight_packed";
        std::vector<uint8_t> shape(16);
        const int64_t dims[2] = {q.rows, q.cols};
        std::memcpy(shape.data(), dims, 16);
        ck.tensors[module_of(name) + ".weight_shape"] = Tensor::owned_bytes(DType::I64, {2}, std::move(shape));
      }
      ck.tensors[q.data] = part(lay.data, 0);
      ck.tensors[q.scales] = part(lay.scales, 1);
      if (lay.biases) ck.tensors[q.biases] = part(*lay.biases, 2);
      if (format == "bnb") {  // the code table travels with every weight
        auto table = bnb_code_table(q.scheme);
        ck.tensors[q.data + ".quant_map"] = Tensor::from_f32({table.begin(), table.end()}, {16});
      }
      desc["tensors"][name] = quant_entry_json(q);
      ++by_params[fmt::format("{} {}-bit group {}", q.scheme, q.bits, q.group_size)];
    }
    ck.quantization = desc;
    for (auto& [k, n] : by_params) std::printf("quantized %d tensors: %s\n", n, k.c_str());
    for (auto& [name, why] : skipped) std::printf("left unquantized: %s (%s)\n", name.c_str(), why.c_str());
    if (calib.active()) std::printf("calibration: %s\n", calib.describe().c_str());
    return ck;
  }

 private:
  static SchemeParams with_bits(SchemeParams p, int bits) {
    p.bits = bits;
    return p;
  }
  // Bits and group size the row supports, before any tensor is looked at.
  static void check_params(const SchemeParams& p, const std::string& what) {
    const Scheme& s = find_scheme(p.scheme);
    if (!in(s.bits, p.bits) || !in(s.group_sizes, p.group_size))
      user_error("{}: {} does not support {} bits with group size {} (bits: {}; group sizes: {})", what, p.scheme,
                 p.bits, p.group_size, fmt::join(s.bits, ", "), fmt::join(s.group_sizes, ", "));
  }

  QuantArgs a_;
  SchemeParams base_;
  std::vector<RecipeRule> rules_;
  bool active_ = false;
};

// --dtype's default: the output follows the source, as mlx_lm and llm-compressor write bf16 scales
// and unquantized tensors from a bf16 model. The embedding's stored dtype (F64: F32); a GGUF's
// F16/BF16 embedding gives F16/BF16, any quantized or F32 one F32 (what dequantization yields).
DType source_dtype(const Checkpoint& ck) {
  if (ck.source_kind == "gguf") {
    const std::string type =
        ck.quantization["tensors"].value("model.embed_tokens.weight", nlohmann::json::object()).value("ggml_type", "");
    return type == "F16" ? DType::F16 : type == "BF16" ? DType::BF16 : DType::F32;
  }
  const DType d = ck.get("model.embed_tokens.weight").dtype;
  return d == DType::F16 || d == DType::BF16 ? d : DType::F32;
}

bool is_nonempty(const fs::path& p) {
  if (!fs::exists(fs::symlink_status(p))) return false;
  if (!fs::is_directory(p)) return true;
  return fs::directory_iterator(p) != fs::directory_iterator();
}

struct Args {
  std::string in, out, format, dtype, max_shard = "5GB", gguf_type, alpha;
  bool force = false, fsync = false, rotate = false;
  uint64_t rotate_seed = 0;
  int threads = 0;
  QuantArgs q;
  calib::WeightCalibArgs c;
};

// The GGUF type nearest to what a quanttool scheme stores (GGUF holds weights only: no
// per-token activation quantization, and a non-uniform 4-bit code table only as iq4_nl).
const char* closest_gguf_type(const std::string& scheme, int bits) {
  if (scheme == "int8" || scheme == "int8_ct") return "q8_0";
  if (scheme == "int4") return "q4_0";
  if (scheme == "affine") return bits == 8 ? "q8_0" : bits == 5 ? "q5_1" : "q4_1";
  if (scheme == "nf4" || scheme == "fp4") return "iq4_nl";
  return "q8_0";
}

// --format gguf: one .gguf file at --out (docs/gguf.md). Its own path through run():
// the output is a file, not a folder, and the quantization is ggml's, chosen by --gguf-type.
int run_gguf(const Args& a) {
  auto t0 = std::chrono::steady_clock::now();
  if (!a.q.scheme.empty())
    user_error("--scheme {}: GGUF cannot store quanttool's {} layout; the closest GGUF type is --gguf-type {}",
               a.q.scheme, a.q.scheme, closest_gguf_type(a.q.scheme, a.q.bits));
  if (a.q.bits >= 0 || a.q.group >= 0 || a.q.embedding_bits >= 0 || a.q.lm_head_bits >= 0 || !a.q.recipe.empty() ||
      a.q.strict || a.q.untie)
    user_error("--bits, --group-size, --recipe, ...: not used by --format gguf (choose the type with --gguf-type)");
  if (!a.dtype.empty()) user_error("--dtype: not used by --format gguf (use --gguf-type f32|f16|bf16)");
  if (!a.c.smooth.empty() || a.c.gptq || a.c.awq || a.rotate)
    user_error("--smooth, --gptq, --awq, --rotate: not supported with --format gguf yet");
  const std::string type_name = a.gguf_type.empty() ? "f16" : a.gguf_type;
  const std::optional<GgmlType> type = gguf_export_type(type_name);
  if (!type) user_error("--gguf-type: unknown type '{}' ({})", type_name, kGgufExportTypes);
  if (!a.c.imatrix.empty() && (*type == GgmlType::F32 || *type == GgmlType::F16 || *type == GgmlType::BF16))
    user_error("--imatrix: --gguf-type {} is not quantized (give a block type: q8_0, q4_0, ..., iq4_nl)", type_name);
  // Importance of every Linear's input channels (calibrate --method act-stats): mean x².
  std::shared_ptr<calib::ActStats> stats;
  if (!a.c.imatrix.empty()) stats = std::make_shared<calib::ActStats>(calib::load_act_stats(a.c.imatrix));
  set_threads(a.threads);

  fs::path out = fs::absolute(a.out).lexically_normal();
  std::error_code ec;
  if (fs::is_directory(out, ec)) user_error("{}: is a folder; --format gguf writes one file", a.out);
  if (fs::exists(a.in, ec) && fs::exists(out, ec) && fs::equivalent(a.in, out, ec))
    user_error("{}: --out is the input itself", a.out);
  if (fs::exists(fs::symlink_status(out)) && !a.force)
    user_error("{}: already exists (use --force to replace it)", a.out);
  if (!out.parent_path().empty() && !fs::is_directory(out.parent_path(), ec))
    user_error("{}: no such folder", out.parent_path().string());

  Checkpoint ck = load_checkpoint(a.in, LoadMode::Deferred);
  if (ck.quantization.is_object() && ck.source_kind != "gguf")
    user_error("{}: is already quantized ({}); convert reads unquantized or GGUF models", a.in, ck.source_kind);
  GgufExportOptions opt;
  opt.type = *type;
  opt.k_mix = gguf_export_is_mix(type_name);
  if (stats)
    opt.importance = [stats, path = a.c.imatrix](const std::string& name, int64_t cols) -> const float* {
      const calib::ChannelStats* st = stats->find(name);
      if (!st) return nullptr;
      if (int64_t(st->sqmean.size()) != cols)
        user_error("{}: {} has {} channels, the weight {} columns", path, name, st->sqmean.size(), cols);
      return st->sqmean.data();
    };
  opt.name = fs::path(a.in).filename().empty() ? fs::path(a.in).parent_path().filename().string()
                                               : fs::path(a.in).stem().string();
  auto t1 = std::chrono::steady_clock::now();
  write_gguf_file(ck, out.string(), opt);
  auto t2 = std::chrono::steady_clock::now();
  // After the write, so that a refused export prints its one error line only.
  if (!ck.tokenizer) std::fprintf(stderr, "warning: %s has no tokenizer; the GGUF has none\n", a.in.c_str());
  auto secs = [](auto x, auto y) { return std::chrono::duration<double>(y - x).count(); };
  std::printf("converted %s -> %s (gguf, %s): %.1f MB; load %.2f s, write %.2f s\n", a.in.c_str(), a.out.c_str(),
              type_name.c_str(), fs::file_size(out) / 1e6, secs(t0, t1), secs(t1, t2));
  return 0;
}

int run(const Args& a) {
  set_durable_writes(a.fsync);
  if (a.format == "gguf") return run_gguf(a);
  if (!a.gguf_type.empty()) user_error("--gguf-type: needs --format gguf");
  auto t0 = std::chrono::steady_clock::now();
  set_threads(a.threads);
  ConvertOptions opt;
  opt.max_shard_bytes = parse_size(a.max_shard);
  // Every flag is checked before anything is read or written.
  const std::string format = a.format.empty() ? default_format(a.q.scheme) : a.format;
  const OutputLayout* layout = nullptr;
  for (auto& l : kLayouts)
    if (format == l.name) layout = &l;
  if (!layout) user_error("--format: unknown output layout '{}' (hf, mlx, native, compressed-tensors, bnb, gguf)", format);
  QuantPlanner planner(a.q, format);
  calib::WeightCalibArgs ca = a.c;
  if (a.alpha == "auto") {
    ca.alpha_auto = true;
  } else if (!a.alpha.empty()) {
    size_t pos = 0;
    try {
      ca.alpha = std::stod(a.alpha, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos == 0 || pos != a.alpha.size()) user_error("--alpha: '{}' is neither a number nor auto", a.alpha);
  }
  if (a.rotate && (!ca.smooth.empty() || !ca.imatrix.empty() || ca.awq))
    user_error("--rotate: act-stats are per channel of the unrotated model; write the rotated model first "
               "(convert --rotate, no --scheme), take act-stats on it, then quantize that");
  if (!a.rotate && a.rotate_seed != 0) user_error("--rotate-seed: needs --rotate");
  calib::WeightCalibration calib(ca);
  if (calib.active() && !planner.active()) user_error("--smooth, --imatrix, --gptq, --awq: need --scheme");

  // Refuse before doing any work: nothing is written when --out is taken.
  fs::path out = fs::absolute(a.out).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "dir/"
  std::error_code ec;
  if (fs::exists(a.in, ec) && fs::exists(out, ec) && fs::equivalent(a.in, out, ec))
    user_error("{}: --out is the input itself", a.out);
  if (is_nonempty(out) && !a.force)
    user_error("{}: already exists and is not empty (use --force to replace it)", a.out);

  Checkpoint ck = load_checkpoint(a.in, LoadMode::Deferred);
  if (!ck.tokenizer) std::fprintf(stderr, "warning: %s has no tokenizer; the output will have none\n", a.in.c_str());
  if (ck.quantization.is_object() && ck.source_kind != "gguf")
    user_error("{}: is already quantized ({}); convert reads unquantized or GGUF models", a.in, ck.source_kind);
  if (a.rotate) {  // before projections are fused and before any calibration reads the weights
    for (auto& [name, t] : ck.tensors) t = materialize(t);
    calib::rotate_residual(ck, a.rotate_seed);
  }
  if (ck.config.desc().fused_proj && planner.active()) {
    if (calib.active())  // its statistics and the GPTQ pass are per projection
      user_error("{}: {} stores qkv_proj / gate_up_proj fused; --smooth, --imatrix and --gptq are not "
                 "applied to fused projections yet (quantize without them)", a.in, ck.config.arch);
    // Quantized as each tool loads Phi-3: qkv_proj and gate_up_proj one weight each.
    fuse_projections(ck.config, ck.tensors);
  }
  opt.dtype = a.dtype.empty() ? source_dtype(ck) : kDTypes.at(a.dtype);
  planner.set_dtype(opt.dtype);
  // Calibration reads whole models (GPTQ runs the network): a deferred GGUF is made up front then.
  if (calib.active())
    for (auto& [name, t] : ck.tensors) t = materialize(t);
  calib.prepare(ck);
  if (planner.active()) ck = planner.quantize(std::move(ck), format, calib);
  auto t1 = std::chrono::steady_clock::now();

  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::current_path();
  fs::create_directories(parent, ec);
  if (ec) user_error("{}: cannot create folder: {}", parent.string(), ec.message());
  const std::string tag = "." + out.filename().string() + ".tmp-" + std::to_string(getpid());
  const fs::path tmp = parent / tag;
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec) user_error("{}: cannot create folder: {}", tmp.string(), ec.message());
  try {
    layout->write(ck, tmp.string(), opt);
    // Swap into place: the old --out (empty, or replaced with --force) goes only after the new
    // one is complete.
    fs::path old;
    if (fs::exists(fs::symlink_status(out))) {
      old = parent / ("." + out.filename().string() + ".old-" + std::to_string(getpid()));
      fs::rename(out, old);
    }
    fs::rename(tmp, out);
    if (!old.empty()) fs::remove_all(old, ec);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    user_error("{}: {}", a.out, e.code().message());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  auto t2 = std::chrono::steady_clock::now();

  uint64_t bytes = 0;
  int files = 0;
  for (auto& e : fs::directory_iterator(out)) {
    if (e.is_regular_file()) bytes += e.file_size(), ++files;
  }
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf("converted %s -> %s (%s, %s): %zu tensors, %d files, %.1f MB; load %.2f s, write %.2f s\n",
              a.in.c_str(), a.out.c_str(), layout->name, dtype_name(opt.dtype), ck.tensors.size(), files,
              bytes / 1e6, secs(t0, t1), secs(t1, t2));
  return 0;
}

const Registrar reg({"convert", "Convert a checkpoint (GGUF file or HF folder) into an output layout",
                     [](CLI::App& sub) -> std::function<int()> {
                       auto a = std::make_shared<Args>();
                       sub.add_option("--in", a->in, "input: a .gguf file or a Hugging Face folder")->required();
                       sub.add_option("--out", a->out, "output folder (--format gguf: output file)")->required();
                       sub.add_option("--format", a->format,
                                      "output layout (default hf; with --scheme: affine mlx, int8 "
                                      "compressed-tensors, int4 native, nf4/fp4 bnb; gguf: one .gguf file)");
                       sub.add_option("--gguf-type", a->gguf_type,
                                      "--format gguf: type of the 2-D weights (f32, f16, bf16, q8_0, q4_0, "
                                      "q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, q3_k_m, q4_k_m, q5_k_m; default f16)");
                       sub.add_option("--dtype", a->dtype, "dtype of float tensors and scales (default: the source's)")
                           ->check(CLI::IsMember({"bf16", "f16", "f32"}));
                       sub.add_option("--max-shard-size", a->max_shard, "shard the weights above this size")
                           ->capture_default_str();
                       sub.add_flag("--force", a->force, "replace an existing non-empty --out");
                       sub.add_flag("--fsync", a->fsync, "wait for each file to reach the disk before renaming it into place");
                       sub.add_option("--scheme", a->q.scheme, "quantize: affine, int8, int8_ct, int4, nf4, fp4");
                       sub.add_option("--bits", a->q.bits, "bits per weight (default: the scheme's)");
                       sub.add_option("--group-size", a->q.group, "elements per scale (0 = per channel)");
                       sub.add_option("--embedding-bits", a->q.embedding_bits, "bits of model.embed_tokens.weight");
                       sub.add_option("--lm-head-bits", a->q.lm_head_bits, "bits of lm_head.weight (tied: needs --untie)");
                       sub.add_option("--recipe", a->q.recipe, "JSON per-tensor overrides (format: cmd_convert.cpp)");
                       sub.add_flag("--strict", a->q.strict, "refuse a weight the group size does not fit");
                       sub.add_flag("--untie", a->q.untie, "write a separate lm_head.weight for a tied model");
                       sub.add_option("--smooth", a->c.smooth, "SmoothQuant: fold scales from this act-stats file");
                       sub.add_option("--alpha", a->alpha,
                                      "SmoothQuant migration strength in [0, 1] (default 0.5), or auto: searched "
                                      "per layer on the --calib text");
                       sub.add_flag("--awq", a->c.awq, "AWQ: activation-aware scale and clip search on the --calib text");
                       sub.add_flag("--no-clip", a->c.no_clip, "--awq: scale search only");
                       sub.add_option("--search-chunks", a->c.search_chunks,
                                      "chunks of 512 tokens for --awq / --alpha auto")
                           ->capture_default_str();
                       sub.add_option("--imatrix", a->c.imatrix, "importance-weighted group scales from this act-stats file");
                       sub.add_flag("--gptq", a->c.gptq, "GPTQ, sequential over the --calib text");
                       sub.add_option("--calib", a->c.calib_text, "calibration text for --gptq (wiki.valid.tokens.txt)");
                       sub.add_option("--calib-chunks", a->c.calib_chunks, "chunks of 512 tokens for --gptq")
                           ->capture_default_str();
                       sub.add_flag("--act-order", a->c.act_order, "GPTQ: columns by decreasing Hessian diagonal");
                       sub.add_flag("--rotate", a->rotate,
                                    "turn the residual stream by a random orthogonal matrix folded into the weights "
                                    "(QuaRot/SpinQuant; norms folded, head untied)");
                       sub.add_option("--rotate-seed", a->rotate_seed, "seed of --rotate's matrix")->capture_default_str();
                       sub.add_option("--threads", a->threads, "threads (default: all cores)");
                       return [a] { return run(*a); };
                     }});

}  // namespace
}  // namespace qt
