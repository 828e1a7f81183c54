// quanttool convert --in MODEL --out DIR [--format hf|mlx|native] [--dtype bf16|f16|f32]
//                   [--scheme NAME [--bits B] [--group-size G] [--embedding-bits B]
//                    [--lm-head-bits B] [--recipe FILE] [--strict] [--untie]]
//                   [--imatrix STATS] [--smooth STATS [--alpha A|auto]] [--awq [--no-clip]]
//                   [--gptq [--act-order [--refit-groups]] [--calib-chunks N] [--gptq-refine N] [--gptq-damp F]] [--calib TEXT] [--search-chunks N]
//                   (calibration: calib/weight_calibration.h)
//                   [--target-bpw B ...]  (--format mlx --scheme affine: per-weight bits and group
//                    chosen for a size, the --target-bpw flags below; calib/mlx_target.h)
//                   [--rotate] [--rotate-heads] [--rotate-seed N]  (the residual stream / heads turned: calib/rotation.h)
//                   [--vision-bits B]  (a VLM's vision tower quantized too: --format mlx)
// quanttool convert --in MODEL --out FILE.gguf --format gguf [--gguf-type TYPE] [--imatrix STATS]
//                   [--tensor-type REGEX=TYPE|@FILE ...] [--gptq --calib TEXT [--calib-chunks N] [--act-order]]
//                   [--rotate [--rotate-seed N]]  (not with --imatrix / --target-bpw: act-stats of the
//                    rotated model are taken on its own rotated GGUF, kRotateImatrix below)
//                   [--target-bpw B --imatrix STATS --calib TEXT [--sensitivity-chunks N] [--save-plan FILE]
//                    [--target-loss kld|weighted-error] [--target-types T,T,...]
//                    [--measurements FILE]]
//                   (per-weight types chosen for a size: calib/gguf_target.h)
//                   (one GGUF file for llama.cpp: run_gguf below, formats/layouts/gguf.h)
// Loads any checkpoint, quantizes its Linear weights (and embedding) when --scheme is given,
// writes it in an output layout. Quantized and cast tensors are deferred: the writer makes them
// a batch at a time as it writes each shard (docs/large-models.md), so memory does not grow
// with the model. --dtype defaults to the source's. The output is built in a temporary
// sibling folder and renamed into place at the end, so --out is either absent, the old
// contents (on error), or complete.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>

#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "apps/command.h"
#include "calib/act_stats_io.h"
#include "calib/gguf_target.h"
#include "calib/mlx_target.h"
#include "calib/gptq_ggml.h"
#include "calib/llama_imatrix.h"
#include "calib/pack_checkpoint.h"
#include "calib/rotation.h"
#include "calib/weight_calibration.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/fused_proj.h"
#include "formats/layouts/gguf.h"
#include "formats/layouts/output_layout.h"
#include "formats/mapped_file.h"
#include "libquant/model/block_tensors.h"
#include "libquant/parallel.h"
#include "libquant/schemes/plan.h"
#include "libquant/schemes/scheme.h"

namespace qt {
namespace cmd_convert {

namespace fs = std::filesystem;

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
  static const std::map<std::string, double> units = {{"", 1},     {"B", 1},      {"KB", 1e3},      {"MB", 1e6},
                                                      {"GB", 1e9}, {"KiB", 1024}, {"MiB", 1 << 20}, {"GiB", 1 << 30}};
  auto it = units.find(s.substr(pos));
  if (it == units.end() || !(v > 0)) user_error("--max-shard-size: '{}' is not a size (e.g. 5GB, 500MiB)", s);
  return uint64_t(v * it->second);
}

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

// A mixture of experts keeps its routers float, as llm-compressor's MoE recipes do (ignore
// "re:.*mlp.gate$"): the top-k choice turns on small differences of the router's logits. The mlx
// layout quantizes them as mlx_lm.convert does: like every Linear (mixtral.py), or by the model's
// quant_predicate (qwen3_moe.py: 8 bits, group 64; kept float where 64 does not divide the hidden
// size, on which mlx_lm.convert itself fails). A layout with float_experts (bnb) keeps the experts
// float too, as its loader does.
void plan_moe(const ModelConfig& c, const OutputLayout& layout, QuantPlan* plan) {
  if (!c.is_moe()) return;
  const MoeNames& m = *c.desc().moe;
  for (int l = 0; l < c.n_layers; ++l) {
    if (!c.is_moe_layer(l)) continue;
    const std::string block = "model.layers." + std::to_string(l) + ".";
    if (layout.float_experts) {
      for (auto it = plan->tensors.begin(); it != plan->tensors.end();) {
        const std::string& name = it->first;
        const bool expert = name.rfind(block + m.experts + ".", 0) == 0 || name == block + m.router + ".weight";
        if (expert) plan->skipped[name] = layout.float_experts;
        it = expert ? plan->tensors.erase(it) : std::next(it);
      }
      continue;
    }
    const std::string name = block + m.router + ".weight";
    auto it = plan->tensors.find(name);
    if (it == plan->tensors.end()) continue;
    if (std::string(layout.name) != "mlx") {
      plan->tensors.erase(it);
      plan->skipped[name] = "mixture-of-experts router, kept float";
    } else if (m.mlx_router_bits > 0 && c.hidden % m.mlx_router_group == 0) {
      it->second.bits = m.mlx_router_bits, it->second.group_size = m.mlx_router_group;
    } else if (m.mlx_router_bits > 0) {
      plan->tensors.erase(it);
      plan->skipped[name] = "router: mlx_lm's " + c.arch + " rule (" + std::to_string(m.mlx_router_bits) +
                            "-bit, group " + std::to_string(m.mlx_router_group) + ") does not fit the hidden size";
    }
  }
}

bool is_nonempty(const fs::path& p) {
  if (!fs::exists(fs::symlink_status(p))) return false;
  if (!fs::is_directory(p)) return true;
  return fs::directory_iterator(p) != fs::directory_iterator();
}

struct Args {
  std::string in, out, format, dtype, max_shard = "5GB", gguf_type, alpha;
  std::vector<std::string> tensor_types;  // --tensor-type REGEX=TYPE or @FILE
  double target_bpw = NAN;
  std::string save_plan, measurements, target_loss = "kld";
  std::vector<std::string> target_types;
  int sensitivity_chunks = 4;
  bool force = false, fsync = false, rotate = false, rotate_heads = false;
  bool rotating() const { return rotate || rotate_heads; }
  uint64_t rotate_seed = 0;
  int threads = 0, vision_bits = 0;
  QuantRequest q;
  calib::WeightCalibArgs c;
};

// --gptq for --format gguf: the sequential pass in each weight's GGUF type (calib/gptq_ggml.h);
// with --imatrix each block's scales come from the importance-weighted search too.
std::map<std::string, std::vector<uint8_t>> gptq_gguf(const Checkpoint& ck, const calib::WeightCalibArgs& c,
                                                      const GgufExportOptions& opt) {
  if (!ck.tokenizer) user_error("--calib: {} has no tokenizer to read the calibration text with", ck.path);
  MappedFile mf = map_file(c.calib_text);
  const std::vector<int32_t> tokens =
      ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), mf.size), true);
  calib::SequentialOptions so;
  so.ctx = c.calib_ctx;
  so.chunks = c.calib_chunks;
  so.bos_id = ck.tokenizer->add_bos() ? ck.tokenizer->bos_id() : -1;
  calib::GptqOptions go;
  go.act_order = c.act_order;
  go.refit_groups = c.refit_groups;
  go.weighted_groups = !c.imatrix.empty();
  go.damp = c.gptq_damp;
  if (c.gptq_refine > 0) user_error("--gptq-refine: not for --format gguf");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = calib::gptq_gguf(ck, gguf_weight_types(ck, opt), tokens, so, go);
  std::printf("gptq%s: %zu weights (%d chunks of %d tokens of %s), %.0f s\n", c.act_order ? " act-order" : "", r.size(),
              std::min<int>(c.calib_chunks, int(tokens.size() / size_t(c.calib_ctx))), c.calib_ctx,
              fs::path(c.calib_text).filename().string().c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return r;
}

// --tensor-type REGEX=TYPE, as llama-quantize's (tools/quantize/quantize.cpp parse_tensor_type):
// the pattern lower-cased, the type any ggml type name we can write, in any case.
// @FILE: one REGEX=TYPE per line (blank lines and # comments skipped), as --save-plan writes.
std::vector<GgufTypeOverride> parse_tensor_types(const std::vector<std::string>& given) {
  std::vector<std::string> args;
  for (const std::string& g : given) {
    if (g.empty() || g[0] != '@') {
      args.push_back(g);
      continue;
    }
    std::ifstream f(g.substr(1));
    if (!f) user_error("--tensor-type {}: cannot read {}", g, g.substr(1));
    for (std::string line; std::getline(f, line);) {
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      if (!line.empty() && line[0] != '#') args.push_back(line);
    }
  }
  std::vector<GgufTypeOverride> out;
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
      user_error("--tensor-type {}: expected REGEX=TYPE (e.g. attn_v=q8_0)", arg);
    std::string pat = arg.substr(0, eq), tname = arg.substr(eq + 1);
    std::transform(pat.begin(), pat.end(), pat.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    std::transform(tname.begin(), tname.end(), tname.begin(), [](unsigned char ch) { return char(std::toupper(ch)); });
    const GgmlTypeRow* row = ggml_type_row_by_name(tname);
    if (!row || !row->from_float)
      user_error(
          "--tensor-type {}: unknown or unwritable type '{}' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
          "iq4_nl, iq4_xs, q2_k, q3_k, q4_k, q5_k, q6_k)",
          arg, arg.substr(eq + 1));
    try {
      out.push_back({pat, std::regex(pat), row->type});
    } catch (const std::regex_error& e) {
      user_error("--tensor-type {}: bad regular expression ({})", arg, e.what());
    }
  }
  return out;
}

// --target-bpw's own flags, checked before anything is read (`need_imatrix`: GGUF weighs its
// errors by the importances and refuses without). Whether --target-bpw is given.
bool check_target_flags(const Args& a, bool need_imatrix) {
  if (std::isnan(a.target_bpw)) {
    if (!a.save_plan.empty() || !a.measurements.empty() || a.target_loss != "kld" || !a.target_types.empty())
      user_error("--save-plan, --measurements, --target-loss, --target-types: need --target-bpw");
    return false;
  }
  if (!(a.target_bpw > 0)) user_error("--target-bpw: must be a positive number of bits per weight");
  if (need_imatrix && a.c.imatrix.empty())
    user_error("--target-bpw: needs --imatrix STATS (the importances it weighs errors by)");
  if (a.sensitivity_chunks <= 0) user_error("--sensitivity-chunks: must be positive");
  if (a.target_loss != "kld" && a.target_loss != "weighted-error")
    user_error("--target-loss: '{}' is neither kld nor weighted-error", a.target_loss);
  if (a.target_loss == "kld" && a.c.calib_text.empty())
    user_error(
        "--target-bpw: needs --calib TEXT (wiki.valid.tokens.txt) to measure each weight's sensitivity "
        "(or --target-loss weighted-error)");
  if (a.target_loss == "weighted-error" && !a.c.calib_text.empty() && !a.c.gptq)
    user_error("--calib: not read with --target-loss weighted-error");
  if (!a.c.calib_text.empty() && !a.c.gptq) {  // read for the sensitivities alone
    if (!fs::is_regular_file(a.c.calib_text)) user_error("--calib {}: no such file", a.c.calib_text);
    if (fs::path(a.c.calib_text).filename().string().find("test") != std::string::npos)
      user_error("--calib {}: that is test text; calibrate on wiki.valid.tokens.txt", a.c.calib_text);
  }
  return true;
}

// The calibration flags as WeightCalibration checks and runs them: --target-bpw reads --calib for
// its sensitivities without --gptq (check_target_flags checked it).
calib::WeightCalibArgs target_calib_args(const Args& a) {
  calib::WeightCalibArgs ca = a.c;
  if (!std::isnan(a.target_bpw) && !ca.gptq) ca.calib_text.clear();
  return ca;
}

// --target-bpw (calib/target_bpw.h): each weight's candidate measured (or read from
// --measurements) and chosen, the plan printed. `source`: what the measurements depend on, which
// a --measurements file must match.
calib::TargetPlan choose_target_plan(const Args& a, Checkpoint& ck, const std::vector<std::string>& names,
                                     const calib::TargetCandidates& cands,
                                     std::function<const float*(const std::string&, int64_t)> importance,
                                     nlohmann::json source) {
  source["imatrix"] = fs::path(a.c.imatrix).filename().string();
  source["calib"] = a.target_loss == "kld" ? fs::path(a.c.calib_text).filename().string() : "";
  source["chunks"] = a.target_loss == "kld" ? a.sensitivity_chunks : 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<calib::TargetWeight> measured;
  if (!a.measurements.empty() && fs::exists(a.measurements)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(std::ifstream(a.measurements));
    } catch (const nlohmann::json::exception& e) {
      user_error("--measurements {}: not JSON ({})", a.measurements, e.what());
    }
    if (j.value("source", nlohmann::json()) != source)
      user_error("--measurements {}: taken with {}, this run gives {}", a.measurements,
                 j.value("source", nlohmann::json()).dump(), source.dump());
    measured = calib::target_from_json(j, names, cands, "--measurements " + a.measurements);
  } else {
    calib::TargetOptions to;
    to.importance = std::move(importance);
    to.progress = true;
    if (a.target_loss == "kld") {  // the model is run, so the tensors are made up front
      if (!ck.tokenizer) user_error("--calib: {} has no tokenizer to read the calibration text with", ck.path);
      for (auto& [name, t] : ck.tensors) t = materialize(t);
      MappedFile mf = map_file(a.c.calib_text);
      to.tokens = ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), mf.size), true);
      to.bos_id = ck.tokenizer->add_bos() ? ck.tokenizer->bos_id() : -1;
      to.chunks = a.sensitivity_chunks;
      to.ctx = a.c.calib_ctx;
    }
    measured = calib::measure_target(ck, names, cands, to);
    if (!a.measurements.empty()) {
      nlohmann::json j = calib::target_to_json(measured);
      j["source"] = source;
      std::ofstream f(a.measurements);
      f << j.dump() << "\n";
      if (!f.flush()) user_error("--measurements {}: cannot write", a.measurements);
    }
  }
  std::vector<std::string> allowed;
  for (const std::string& n : a.target_types) {
    auto it = std::find_if(cands.names.begin(), cands.names.end(), [&n](const std::string& c) {
      return std::equal(c.begin(), c.end(), n.begin(), n.end(), [](char x, char y) {
        return std::tolower((unsigned char)x) == std::tolower((unsigned char)y);
      });
    });
    if (it == cands.names.end())
      user_error("--target-types: '{}' is not a candidate ({})", n, fmt::join(cands.names, ", "));
    allowed.push_back(*it);
  }
  const calib::TargetPlan plan = calib::choose_target(std::move(measured), a.target_bpw, allowed);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<const calib::TargetWeight*> order;
  for (auto& w : plan.weights) order.push_back(&w);
  std::sort(order.begin(), order.end(), [](auto* x, auto* y) { return x->label < y->label; });
  std::map<std::string, int> counts;
  for (auto* w : order) {
    const size_t k = size_t(w->pick);
    const std::string& tn = w->cands[k];
    ++counts[tn];
    std::printf("  %-28s %-7s %10llu bytes  %6.3f bpw  est. loss %.3e\n", w->label.c_str(), tn.c_str(),
                (unsigned long long)w->bytes[k], 8.0 * double(w->bytes[k]) / double(w->rows * w->cols),
                w->sensitivity * w->err[k]);
  }
  std::string mixed;
  for (auto& [tn, n] : counts) mixed += (mixed.empty() ? "" : ", ") + std::to_string(n) + " " + tn;
  std::printf("target-bpw %g (%s, %.0f s): %s; %llu bytes of 2-D weights, %.4f bpw; estimated loss %.4g\n",
              a.target_bpw, a.target_loss == "kld" ? "KLD-scaled weighted error" : "weighted error", secs,
              mixed.c_str(), (unsigned long long)plan.bytes, plan.bpw(), plan.loss);
  return plan;
}

// --format gguf --target-bpw: the plan saved as --tensor-type lines (default OUT.tensor-types)
// and set as opt's overrides. Returns the --gguf-type the file is labelled with: the one given,
// else the plan's main type.
std::string plan_target_bpw(const Args& a, Checkpoint& ck, GgufExportOptions* opt) {
  std::vector<std::string> names;
  for (auto& [hf, type] : gguf_weight_types(ck, *opt)) names.push_back(hf);
  const calib::TargetPlan plan =
      choose_target_plan(a, ck, names, calib::gguf_target_candidates(ck), opt->importance, nlohmann::json::object());

  const std::vector<std::string> lines = calib::gguf_target_recipe(plan);
  const std::string type_name = a.gguf_type.empty() ? calib::gguf_target_main_type(plan) : a.gguf_type;
  const std::string path = a.save_plan.empty() ? a.out + ".tensor-types" : a.save_plan;
  {
    std::ofstream f(path);
    f << "# convert --target-bpw " << a.target_bpw << ": " << plan.bpw() << " bpw over the 2-D weights, " << plan.bytes
      << " bytes\n# re-apply: convert --format gguf --gguf-type " << type_name << " --tensor-type @" << path
      << " --imatrix " << a.c.imatrix << "\n";
    for (const std::string& l : lines) f << l << "\n";
    if (!f.flush()) user_error("--save-plan {}: cannot write", path);
  }
  std::printf("plan saved to %s (re-apply: --gguf-type %s --tensor-type @%s --imatrix %s)\n", path.c_str(),
              type_name.c_str(), path.c_str(), a.c.imatrix.c_str());
  opt->tensor_types = parse_tensor_types(lines);
  return type_name;
}

// Act-stats (--imatrix, --smooth, --target-bpw's importances) are per channel of the model they were
// taken on; the rotation mixes every residual channel, so stats of the unrotated model do not apply.
constexpr const char* kRotateImatrix =
    "--rotate: act-stats are per channel of the unrotated model; write the rotated model first (convert --rotate, "
    "no --scheme; --format gguf --gguf-type f32), take act-stats on it (calibrate --method act-stats), then quantize "
    "that with --imatrix";

// --format gguf: one .gguf file at --out (docs/gguf.md). Its own path through run():
// the output is a file, not a folder, and the quantization is ggml's, chosen by --gguf-type.
int run_gguf(const Args& a) {
  auto t0 = std::chrono::steady_clock::now();
  if (!a.q.scheme.empty())
    user_error("--scheme {}: GGUF cannot store quanttool's {} layout; the closest GGUF type is --gguf-type {}",
               a.q.scheme, a.q.scheme, closest_gguf_type(find_scheme(a.q.scheme), a.q.bits));
  if (a.q.bits >= 0 || a.q.group >= 0 || a.q.embedding_bits >= 0 || a.q.lm_head_bits >= 0 || !a.q.recipe.empty() ||
      a.q.strict || a.q.untie)
    user_error("--bits, --group-size, --recipe, ...: not used by --format gguf (choose the type with --gguf-type)");
  if (!a.dtype.empty()) user_error("--dtype: not used by --format gguf (use --gguf-type f32|f16|bf16)");
  if (!a.c.smooth.empty() || a.c.awq) user_error("--smooth, --awq: not supported with --format gguf yet");
  if (!std::isnan(a.target_bpw) && !a.tensor_types.empty())
    user_error("--target-bpw, --tensor-type: give one (the plan sets every weight's type)");
  const bool target = check_target_flags(a, true);
  if (a.rotating() && (!a.c.imatrix.empty() || target)) user_error("{}", kRotateImatrix);
  if (!a.rotating() && a.rotate_seed != 0) user_error("--rotate-seed: needs --rotate or --rotate-heads");
  // A placeholder until the plan names the type (gguf_weight_types needs a quantized one).
  std::string type_name = a.gguf_type.empty() ? (target ? "q8_0" : "f16") : a.gguf_type;
  const std::optional<GgmlType> type = gguf_export_type(type_name);
  if (!type) user_error("--gguf-type: unknown type '{}' ({})", type_name, gguf_export_type_names());
  if ((!a.c.imatrix.empty() || a.c.gptq) &&
      (*type == GgmlType::F32 || *type == GgmlType::F16 || *type == GgmlType::BF16))
    user_error("--imatrix, --gptq: --gguf-type {} is not quantized (give a block type: q8_0, q4_0, ..., iq4_nl)",
               type_name);
  // The calibration flags' own checks (--calib given and not the test text, --act-order with --gptq);
  // --target-bpw reads --calib for its sensitivities without --gptq.
  const calib::WeightCalibration checks(target_calib_args(a));
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
  if (ck.multimodal)  // llama.cpp keeps a VLM's vision tower in a separate mmproj file
    user_error(
        "{}: a vision-language model; --format gguf writes text models only (use --format hf or "
        "compressed-tensors)",
        a.in);
  if (a.rotating() && ck.config.is_moe())
    user_error("{}: {} is a mixture-of-experts model; --rotate is not folded into its experts", a.in, ck.config.arch);
  if (a.rotating()) {  // before the head's tie and the weights are read: the GGUF holds the rotated model
    for (auto& [name, t] : ck.tensors) t = materialize(t);
    if (a.rotate) calib::rotate_residual(ck, a.rotate_seed);
    if (a.rotate_heads) calib::rotate_heads(ck, a.rotate_seed);
  }
  if (ck.config.is_moe() && target)
    user_error("{}: {} is a mixture-of-experts model; --target-bpw does not plan its experts yet", a.in,
               ck.config.arch);
  // Importance of every Linear's input channels (calibrate --method act-stats): mean x².
  std::shared_ptr<calib::ActStats> stats;
  if (!a.c.imatrix.empty()) {
    stats = std::make_shared<calib::ActStats>(calib::load_act_stats(a.c.imatrix));
    calib::resolve_expert_slices(stats.get(), ck.config);
  }
  GgufExportOptions opt;
  opt.gguf_type = type_name;
  opt.tensor_types = parse_tensor_types(a.tensor_types);
  if (stats)
    opt.importance = [stats, path = a.c.imatrix, tied = head_is_embedding(ck)](const std::string& name,
                                                                               int64_t cols) -> const float* {
      const calib::ChannelStats* st = stats->find(name, tied);
      if (!st) return nullptr;
      if (int64_t(st->sqmean.size()) != cols)
        user_error("{}: {} has {} channels, the weight {} columns", path, name, st->sqmean.size(), cols);
      return st->sqmean.data();
    };
  if (target) {
    if (ck.config.desc().fused_proj)
      user_error("--target-bpw: {} stores fused projections; not supported yet", ck.config.arch);
    opt.gguf_type = type_name;
    type_name = plan_target_bpw(a, ck, &opt);
    if (!gguf_export_type(type_name))
      user_error("--gguf-type: unknown type '{}' ({})", type_name, gguf_export_type_names());
    opt.gguf_type = type_name;
  }
  std::map<std::string, std::vector<uint8_t>> gptq_done;
  if (a.c.gptq) {
    for (auto& [name, t] : ck.tensors) t = materialize(t);  // GPTQ runs the network
    gptq_done = gptq_gguf(ck, a.c, opt);
    opt.packed = [&gptq_done](const std::string& name) -> const std::vector<uint8_t>* {
      auto it = gptq_done.find(name);
      return it == gptq_done.end() ? nullptr : &it->second;
    };
  }
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

// --dtype's name for d (kDTypes' key).
std::string dtype_flag(DType d) {
  for (auto& [name, v] : kDTypes)
    if (v == d) return name;
  return dtype_name(d);
}

// --format mlx --target-bpw: the weights the scheme would quantize measured at every affine bits
// and group (calib/mlx_target.h), the plan saved as a --recipe file (default OUT.recipe.json)
// and returned as the planner that applies it.
QuantPlanner plan_mlx_target(const Args& a, Checkpoint& ck, const calib::WeightCalibration& calib,
                             const OutputLayout& layout, DType dtype) {
  QuantRequest all = a.q;
  all.group = 32;  // every weight some candidate fits: the smallest group divides the most rows
  QuantPlanner base(all, layout, QT_SOURCE_DIR);
  base.set_dtype(dtype);
  std::vector<std::string> names;
  for (auto& [name, p] : base.plan(ck).tensors) names.push_back(name);
  std::function<const float*(const std::string&, int64_t)> importance;
  if (!a.c.imatrix.empty()) {
    auto stats = std::make_shared<calib::ActStats>(calib::load_act_stats(a.c.imatrix));
    importance = [stats, tied = head_is_embedding(ck)](const std::string& name, int64_t cols) -> const float* {
      const calib::ChannelStats* st = stats->find(name, tied);
      return st && int64_t(st->sqmean.size()) == cols ? st->sqmean.data() : nullptr;
    };
  }
  const calib::TargetPlan plan = choose_target_plan(a, ck, names, calib::mlx_target_candidates(calib, dtype),
                                                    importance, {{"format", "mlx"}, {"dtype", dtype_flag(dtype)}});
  const std::string path = a.save_plan.empty() ? a.out + ".recipe.json" : a.save_plan;
  std::string again = "convert --format mlx --scheme affine --dtype " + dtype_flag(dtype) + " --recipe " + path +
                      (a.c.imatrix.empty() ? "" : " --imatrix " + a.c.imatrix);
  if (a.c.gptq)
    again += " --gptq --calib " + a.c.calib_text + " --calib-chunks " + std::to_string(a.c.calib_chunks) +
             (a.c.act_order ? " --act-order" : "") + (a.c.refit_groups ? " --refit-groups" : "") +
             (a.c.gptq_refine > 0 ? " --gptq-refine " + std::to_string(a.c.gptq_refine) : "") +
             (a.c.gptq_damp != 0.01 ? fmt::format(" --gptq-damp {}", a.c.gptq_damp) : "");
  const std::string comment =
      fmt::format("convert --target-bpw {}: {:.4f} bpw over the 2-D weights, {} bytes; re-apply: {}", a.target_bpw,
                  plan.bpw(), plan.bytes, again);
  {
    std::ofstream f(path);
    f << calib::mlx_target_recipe(plan, comment);
    if (!f.flush()) user_error("--save-plan {}: cannot write", path);
  }
  std::printf("plan saved to %s (re-apply: %s)\n", path.c_str(), again.c_str());
  QuantRequest r = a.q;
  r.recipe = path;
  QuantPlanner planner(r, layout, QT_SOURCE_DIR);
  planner.set_dtype(dtype);
  return planner;
}

int run(const Args& a) {
  set_durable_writes(a.fsync);
  if (a.format == "gguf") return run_gguf(a);
  if (!a.gguf_type.empty()) user_error("--gguf-type: needs --format gguf");
  if (!a.tensor_types.empty()) user_error("--tensor-type: needs --format gguf");
  auto t0 = std::chrono::steady_clock::now();
  set_threads(a.threads);
  HfWriteOptions opt;
  opt.max_shard_bytes = parse_size(a.max_shard);
  // Every flag is checked before anything is read or written.
  const std::string format = a.format.empty() ? default_layout(a.q.scheme) : a.format;
  const OutputLayout* layout = find_output_layout(format);
  if (!layout) user_error("--format: unknown output layout '{}' ({}, gguf)", format, output_layout_names());
  QuantPlanner planner(a.q, *layout, QT_SOURCE_DIR);
  const bool target = check_target_flags(a, false);
  if (target && (std::string(layout->name) != "mlx" || a.q.scheme != "affine"))
    user_error("--target-bpw: needs --format gguf, or --format mlx --scheme affine");
  if (target &&
      (!a.q.recipe.empty() || a.q.bits >= 0 || a.q.group >= 0 || a.q.embedding_bits >= 0 || a.q.lm_head_bits >= 0))
    user_error(
        "--target-bpw, --recipe / --bits / --group-size: give one (the plan sets every weight's bits and group)");
  if (target && (!a.c.smooth.empty() || a.c.awq || a.rotating()))
    user_error("--target-bpw: --smooth, --awq and --rotate are not supported with it yet");
  calib::WeightCalibArgs ca = target_calib_args(a);
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
  if (a.rotating() && (!ca.smooth.empty() || !ca.imatrix.empty() || ca.awq)) user_error("{}", kRotateImatrix);
  if (!a.rotating() && a.rotate_seed != 0) user_error("--rotate-seed: needs --rotate or --rotate-heads");
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
  if (!ck.tokenizer && !ck.multimodal)  // a VLM's tokenizer files are copied as they are
    std::fprintf(stderr, "warning: %s has no tokenizer; the output will have none\n", a.in.c_str());
  if (ck.quantization.is_object() && ck.source_kind != "gguf")
    user_error("{}: is already quantized ({}); convert reads unquantized or GGUF models", a.in, ck.source_kind);
  const std::string lname = layout->name;
  // A vision-language model: the layouts whose writers carry its vision tower and names through
  // (formats/vlm.h); the residual-stream rotation would turn the embedding space the projector
  // writes into, and the head stays tied as the VLM's config says.
  if (ck.multimodal &&
      (a.rotating() || a.q.untie || (lname != "hf" && lname != "compressed-tensors" && lname != "mlx")))
    user_error(
        "{}: a vision-language model ({}); convert writes it to --format hf, compressed-tensors or mlx, without "
        "--rotate or --untie",
        a.in, ck.multimodal->config.value("model_type", "?"));
  // A mixture of experts goes to the layouts that store each expert's projections under their HF
  // names (hf; compressed-tensors, read per expert by vLLM; native; bnb, experts float), and to mlx
  // (mlx_lm's stacked switch_mlp; GGUF: run_gguf). --imatrix and --gptq work per expert
  // (calib/expert_prior.h); SmoothQuant and AWQ would fold one scale into the norm that the router
  // and every expert read, which they do not yet.
  // --vision-bits: mlx_vlm quantizes a vision tower's Linears when the folder holds their scales
  // (utils.py load_model's class predicate); the other layouts' loaders keep it float.
  if (a.vision_bits != 0 && (!ck.multimodal || lname != "mlx" || a.q.scheme != "affine"))
    user_error("--vision-bits: for a vision-language model written with --format mlx --scheme affine");
  if (ck.config.is_moe() &&
      (a.rotating() || !ca.smooth.empty() || ca.awq ||
       (lname != "hf" && lname != "compressed-tensors" && lname != "native" && lname != "mlx" && lname != "bnb")))
    user_error(
        "{}: {} is a mixture-of-experts model; convert writes it to --format hf, compressed-tensors, native, mlx, "
        "bnb or gguf only, without --rotate, --smooth or --awq",
        a.in, ck.config.arch);
  if (ck.config.is_moe() && lname == "mlx" && !ck.config.desc().moe->mlx_switch_mlp)
    user_error("{}: {} has no mlx_lm layout here; convert writes it to --format hf, compressed-tensors or native", a.in,
               ck.config.arch);
  if (a.rotating()) {  // before projections are fused and before any calibration reads the weights
    for (auto& [name, t] : ck.tensors) t = materialize(t);
    if (a.rotate) calib::rotate_residual(ck, a.rotate_seed);
    if (a.rotate_heads) calib::rotate_heads(ck, a.rotate_seed);
  }
  if (ck.config.desc().fused_proj && planner.active()) {
    if (calib.active())  // its statistics and the GPTQ pass are per projection
      user_error(
          "{}: {} stores qkv_proj / gate_up_proj fused; --smooth, --imatrix and --gptq are not "
          "applied to fused projections yet (quantize without them)",
          a.in, ck.config.arch);
    // Quantized as each tool loads Phi-3: qkv_proj and gate_up_proj one weight each.
    fuse_projections(ck.config, ck.tensors);
  }
  opt.dtype = a.dtype.empty() ? source_dtype(ck) : kDTypes.at(a.dtype);
  planner.set_dtype(opt.dtype);
  // Calibration reads whole models (GPTQ runs the network): a deferred GGUF is made up front then.
  if (calib.active())
    for (auto& [name, t] : ck.tensors) t = materialize(t);
  calib.prepare(ck);
  if (target) {
    if (ck.config.is_moe() || ck.config.desc().fused_proj)
      user_error("--target-bpw: {} ({}) has experts or fused projections; not supported yet", a.in, ck.config.arch);
    planner = plan_mlx_target(a, ck, calib, *layout, opt.dtype);
  }
  if (planner.active()) {
    QuantPlan plan = planner.plan(ck);
    plan_moe(ck.config, *layout, &plan);
    const SchemeParams text_params = plan.tensors.empty() ? SchemeParams{} : plan.tensors.begin()->second;
    ck = calib::pack_checkpoint(std::move(ck), plan, *layout, calib);
    for (const std::string& line : plan_summary(plan)) std::printf("%s\n", line.c_str());
    if (a.vision_bits != 0) {
      SchemeParams vp = text_params;
      vp.bits = a.vision_bits;
      validate_scheme(vp, 1, vp.group_size, "--vision-bits");
      const int n = calib::pack_vision_tower(ck, vp, *layout);
      std::printf("vision tower: %d weights affine %d-bit group %d\n", n, vp.bits, vp.group_size);
    }
    if (calib.active()) std::printf("calibration: %s\n", calib.describe().c_str());
  }
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
  std::printf("converted %s -> %s (%s, %s): %zu tensors, %d files, %.1f MB; load %.2f s, write %.2f s\n", a.in.c_str(),
              a.out.c_str(), layout->name, dtype_name(opt.dtype), ck.tensors.size(), files, bytes / 1e6, secs(t0, t1),
              secs(t1, t2));
  return 0;
}

const Registrar reg(
    {"convert", "Convert a checkpoint (GGUF file or HF folder) into an output layout",
     [](CLI::App& sub) -> std::function<int()> {
       auto a = std::make_shared<Args>();
       sub.add_option("--in", a->in, "input: a .gguf file or a Hugging Face folder")->required();
       sub.add_option("--out", a->out, "output folder (--format gguf: output file)")->required();
       sub.add_option("--format", a->format,
                      "output layout (default hf; with --scheme: affine mlx, int8 "
                      "compressed-tensors, int4 native, nf4/fp4 bnb; gguf: one .gguf file)");
       sub.add_option("--gguf-type", a->gguf_type,
                      "--format gguf: type of the 2-D weights, or one of llama-quantize's mixes (" +
                          gguf_export_type_names() + "; default f16)");
       sub.add_option("--tensor-type", a->tensor_types,
                      "--format gguf: REGEX=TYPE, the type of the weights whose GGUF name matches (repeatable; "
                      "as llama-quantize --tensor-type)")
           ->take_all()
           ->allow_extra_args(false);
       sub.add_option(
           "--target-bpw", a->target_bpw,
           "--format gguf, or mlx --scheme affine: choose each weight's type (mlx: bits and group) to meet B "
           "bits per weight (2-D weights) at the least estimated loss; --calib TEXT measures each weight's "
           "sensitivity (gguf: needs --imatrix)");
       sub.add_option(
           "--save-plan", a->save_plan,
           "--target-bpw: where to write the plan (default OUT.tensor-types; mlx: OUT.recipe.json, a --recipe file)");
       sub.add_option("--target-loss", a->target_loss,
                      "--target-bpw: kld (each weight's error scaled by its measured KLD sensitivity; needs --calib) "
                      "or weighted-error (the importance-weighted error alone)")
           ->capture_default_str();
       sub.add_option("--target-types", a->target_types,
                      "--target-bpw: choose only among these types (comma-separated; default all candidates)")
           ->delimiter(',');
       sub.add_option("--measurements", a->measurements,
                      "--target-bpw: read the per-weight measurements from FILE if it exists, else write them there "
                      "(plans for several B from one measurement)");
       sub.add_option("--sensitivity-chunks", a->sensitivity_chunks,
                      "--target-bpw --calib: chunks of 512 tokens for the sensitivities")
           ->capture_default_str();
       sub.add_option("--dtype", a->dtype, "dtype of float tensors and scales (default: the source's)")
           ->check(CLI::IsMember({"bf16", "f16", "f32"}));
       sub.add_option("--max-shard-size", a->max_shard, "shard the weights above this size")->capture_default_str();
       sub.add_flag("--force", a->force, "replace an existing non-empty --out");
       sub.add_flag("--fsync", a->fsync, "wait for each file to reach the disk before renaming it into place");
       sub.add_option("--scheme", a->q.scheme, "quantize: " + scheme_names());
       sub.add_option("--bits", a->q.bits, "bits per weight (default: the scheme's)");
       sub.add_option("--group-size", a->q.group, "elements per scale (0 = per channel)");
       sub.add_option("--embedding-bits", a->q.embedding_bits, "bits of model.embed_tokens.weight");
       sub.add_option("--lm-head-bits", a->q.lm_head_bits, "bits of lm_head.weight (tied: needs --untie)");
       sub.add_option("--recipe", a->q.recipe, "JSON per-tensor overrides (format: libquant/schemes/recipe.h)");
       sub.add_flag("--strict", a->q.strict, "refuse a weight the group size does not fit");
       sub.add_flag("--untie", a->q.untie, "write a separate lm_head.weight for a tied model");
       sub.add_option("--smooth", a->c.smooth, "SmoothQuant: fold scales from this act-stats file");
       sub.add_option("--alpha", a->alpha,
                      "SmoothQuant migration strength in [0, 1] (default 0.5), or auto: searched "
                      "per layer on the --calib text");
       sub.add_flag("--awq", a->c.awq, "AWQ: activation-aware scale and clip search on the --calib text");
       sub.add_flag("--no-clip", a->c.no_clip, "--awq: scale search only");
       sub.add_option("--search-chunks", a->c.search_chunks, "chunks of 512 tokens for --awq / --alpha auto")
           ->capture_default_str();
       sub.add_option("--imatrix", a->c.imatrix, "importance-weighted group scales from this act-stats file");
       sub.add_flag("--gptq", a->c.gptq, "GPTQ, sequential over the --calib text");
       sub.add_option("--calib", a->c.calib_text,
                      "calibration text for --gptq and --target-bpw (wiki.valid.tokens.txt)");
       sub.add_option("--calib-chunks", a->c.calib_chunks, "chunks of 512 tokens for --gptq")->capture_default_str();
       sub.add_flag("--act-order", a->c.act_order, "GPTQ: columns by decreasing Hessian diagonal");
       sub.add_flag("--refit-groups", a->c.refit_groups,
                    "GPTQ --act-order: fit each group when the pass first reaches one of its columns, from the weights "
                    "as updated so far (default: from the original weights up front)");
       sub.add_option("--gptq-refine", a->c.gptq_refine,
                      "GPTQ: after each weight's sweep, N passes of coordinate descent on its output error over the "
                      "codes and group scales (nvfp4: E4M3 scales; other grids: codes only)")
           ->capture_default_str();
       sub.add_option("--gptq-damp", a->c.gptq_damp, "GPTQ: dampening added to H's diagonal, times its mean")
           ->capture_default_str();
       sub.add_flag("--rotate", a->rotate,
                    "turn the residual stream by a random orthogonal matrix folded into the weights "
                    "(QuaRot/SpinQuant; norms folded, head untied)");
       sub.add_option("--rotate-seed", a->rotate_seed, "seed of --rotate's matrix")->capture_default_str();
       sub.add_flag("--rotate-heads", a->rotate_heads,
                    "turn each attention head's values (v_proj rows, o_proj columns) by a random "
                    "orthogonal matrix folded into the weights (SpinQuant's R2; with or without --rotate)");
       sub.add_option("--vision-bits", a->vision_bits,
                      "a vision-language model's vision tower quantized too at these bits (mlx; default: kept)");
       sub.add_option("--threads", a->threads, "threads (default: all cores)");
       return [a] { return run(*a); };
     }});

}  // namespace cmd_convert
}  // namespace qt
