#include "calib/weight_calibration.h"

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "calib/act_stats_io.h"
#include "calib/expert_prior.h"
#include "calib/fused_global_scale.h"
#include "calib/llama_imatrix.h"
#include "calib/scale_fold.h"
#include "calib/sequential.h"
#include "calib/weighted_fit.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "libquant/model/block_tensors.h"
#include "libquant/schemes/grid.h"

namespace qt::calib {

WeightCalibration::WeightCalibration(const WeightCalibArgs& a) : a_(a) {
  if (!(a.alpha >= 0 && a.alpha <= 1)) user_error("--alpha: must be in [0, 1], got {}", a.alpha);
  if (a.gptq && a.calib_text.empty()) user_error("--gptq: give the calibration text with --calib TEXT");
  if (a.awq && a.calib_text.empty()) user_error("--awq: give the calibration text with --calib TEXT");
  if (a.alpha_auto && (a.smooth.empty() || a.calib_text.empty()))
    user_error("--alpha auto: needs --smooth STATS and the calibration text (--calib TEXT)");
  if (a.awq && !a.smooth.empty()) user_error("--awq, --smooth: both fold scales into the model; give one");
  if (!a.gptq && a.act_order) user_error("--act-order: needs --gptq");
  if (!a.act_order && a.refit_groups) user_error("--refit-groups: needs --gptq --act-order");
  if (a.gptq_refine < 0) user_error("--gptq-refine: must be 0 or more sweeps, got {}", a.gptq_refine);
  if (!a.gptq && a.gptq_refine > 0) user_error("--gptq-refine: needs --gptq");
  if (!(a.gptq_damp > 0 && a.gptq_damp <= 1)) user_error("--gptq-damp: must be in (0, 1], got {}", a.gptq_damp);
  if (!a.gptq && a.gptq_damp != 0.01) user_error("--gptq-damp: needs --gptq");
  if (!a.gptq && !a.awq && !a.alpha_auto && !a.calib_text.empty())
    user_error("--calib: needs --gptq, --awq or --alpha auto");
  if (a.no_clip && !a.awq) user_error("--no-clip: needs --awq");
  if (a.calib_chunks <= 0) user_error("--calib-chunks: must be positive, got {}", a.calib_chunks);
  if (a.search_chunks <= 0) user_error("--search-chunks: must be positive, got {}", a.search_chunks);
  if (!a.calib_text.empty() && !std::filesystem::is_regular_file(a.calib_text))
    user_error("--calib {}: no such file", a.calib_text);
  if (!a.calib_text.empty() &&
      std::filesystem::path(a.calib_text).filename().string().find("test") != std::string::npos)
    user_error("--calib {}: that is test text; calibrate on wiki.valid.tokens.txt", a.calib_text);
  if (!a.smooth.empty()) smooth_ = load_act_stats(a.smooth);
  if (smooth_ && !smooth_->has_absmax())
    user_error("--smooth {}: a llama.cpp imatrix holds no max |x| (take act-stats with calibrate)", a.smooth);
  if (!a.imatrix.empty()) imatrix_ = a.imatrix == a.smooth ? smooth_ : load_act_stats(a.imatrix);
}

void WeightCalibration::rescale_imatrix(const std::map<std::string, std::vector<float>>& scales) {
  // The statistics were taken on the unsmoothed model; a smoothed projection reads X_j / s_j.
  if (imatrix_)
    for (auto& [name, s] : scales)
      if (auto it = imatrix_->linears.find(name); it != imatrix_->linears.end())
        for (size_t j = 0; j < s.size(); ++j) {
          if (!it->second.absmax.empty()) it->second.absmax[j] /= s[j];
          it->second.sqmean[j] /= s[j] * s[j];
        }
}

void WeightCalibration::prepare(Checkpoint& ck) {
  embedding_is_head_ = head_is_embedding(ck);
  for (std::optional<ActStats>* s : {&smooth_, &imatrix_})  // a llama.cpp imatrix's merged experts
    if (*s) resolve_expert_slices(&**s, ck.config);
  if (!smooth_ || a_.alpha_auto) return;
  SmoothOptions o;
  o.alpha = a_.alpha;
  rescale_imatrix(smooth_checkpoint(ck, *smooth_, o));
}

const std::vector<int32_t>& WeightCalibration::calib_tokens(const Checkpoint& ck) {
  if (!tokens_.empty()) return tokens_;
  if (!ck.tokenizer) user_error("--calib: {} has no tokenizer to read the calibration text with", ck.path);
  MappedFile mf = map_file(a_.calib_text);
  tokens_ = ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), mf.size), true);
  return tokens_;
}

void WeightCalibration::run(Checkpoint& ck, std::map<std::string, SchemeParams>& plan) {
  const int32_t bos = ck.tokenizer && ck.tokenizer->add_bos() ? ck.tokenizer->bos_id() : -1;
  if (a_.awq || a_.alpha_auto) {
    ScaleFoldOptions fo;
    fo.awq = a_.awq;
    fo.clip = !a_.no_clip;
    if (smooth_) fo.stats = &*smooth_;
    fo.seq.ctx = a_.calib_ctx;
    fo.seq.chunks = a_.search_chunks;
    fo.seq.bos_id = bos;
    rescale_imatrix(search_and_fold(ck, plan, calib_tokens(ck), fo));
  }
  // From the weights GPTQ starts from. With --imatrix alone, searched under its importances; GPTQ
  // keeps the shared package scale (on SmolLM2 the search gave GPTQ + imatrix no gain: results/fp4.md).
  ImportanceOf imp;
  if (imatrix_ && !a_.gptq)
    imp = [this](const std::string& name, int64_t cols) -> const float* {
      const ChannelStats* st = imatrix_->find(name, embedding_is_head_);
      return st && int64_t(st->sqmean.size()) == cols ? st->sqmean.data() : nullptr;
    };
  share_fused_global_scales(ck, plan, imp);
  if (!a_.gptq) return;
  std::set<std::string> targets;
  for (auto& [name, p] : plan) {
    if (name == "model.embed_tokens.weight" && !head_is_embedding(ck))
      continue;  // an untied embedding is a lookup table: no input, RTN
    if (!SchemeGrid(p).fits(ck.get(name).shape[0], ck.get(name).shape[1])) continue;
    targets.insert(name);
  }
  const std::vector<int32_t>& ids = calib_tokens(ck);
  SequentialOptions so;
  so.ctx = a_.calib_ctx;
  so.chunks = a_.calib_chunks;
  so.bos_id = bos;
  GptqOptions go;
  go.act_order = a_.act_order;
  go.refit_groups = a_.refit_groups;
  go.weighted_groups = imatrix_.has_value();
  go.refine_sweeps = a_.gptq_refine;
  go.damp = a_.gptq_damp;
  std::string prepared_site;  // the last site's prepared Hessian serves its other projections
  GptqHessian prepared;
  // Whether no later projection of name's site (q, k, v share one; gate, up another; an expert's
  // gate and up theirs; the order is block_projections') is a target: then its prepared Hessian goes
  // at once, not when the next site replaces it (down_proj's is 14336² floats, 0.8 GB at 8B).
  // Found once: the last target of each site in block_projections' order (the pass's).
  const ModelConfig& c = ck.config;
  std::set<std::string> last_of_site_set;
  {
    std::map<std::string, std::string> last;  // site -> its last target
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string prefix = "model.layers." + std::to_string(l) + ".";
      for (const std::string& p : block_projections(c, l)) {
        const std::string lead = shared_input_leader(c, p);
        if (targets.count(prefix + p)) last[prefix + (lead.empty() ? p : lead)] = prefix + p;
      }
    }
    for (auto& [site, name] : last) last_of_site_set.insert(name);
  }
  auto last_of_site = [&](const std::string& name) {
    return name.rfind("model.layers.", 0) != 0 || last_of_site_set.count(name) > 0;
  };
  gptq_done_ = quantize_sequential(
      ck, targets, ids, so,
      [&](const std::string& name, const std::vector<float>& w, int64_t rows, int64_t cols, std::vector<float>& H,
          const std::string& site) {
        if (site != prepared_site) {  // the site's first projection: H is not needed after
          prepared = GptqHessian();
          prepared = prepare_gptq_hessian(std::move(H), cols, go), prepared_site = site;
        }
        RefineResult rr;
        auto r = gptq_quantize(SchemeGrid(plan.at(name)), w.data(), rows, cols, prepared, go, nullptr, &rr);
        if (go.refine_sweeps > 0)
          fmt::print(
              "gptq-refine {}: output error {:.6g} -> {:.6g} ({:+.2f}%), {} codes and "
              "{} scales changed\n",
              name, rr.before, rr.after, rr.before > 0 ? 100 * (rr.after / rr.before - 1) : 0.0, rr.codes_changed,
              rr.scales_changed);
        if (last_of_site(name)) prepared = GptqHessian(), prepared_site.clear();
        return r;
      });
}

std::optional<PackedTensor> WeightCalibration::quantize(const std::string& name, const float* w, int64_t rows,
                                                        int64_t cols, const SchemeParams& p) const {
  if (auto it = gptq_done_.find(name); it != gptq_done_.end()) return it->second;  // read-only: callers run in parallel
  if (!imatrix_) return std::nullopt;
  const ChannelStats* st = imatrix_->find(name, embedding_is_head_);
  const SchemeGrid grid(p);
  if (!st || int64_t(st->sqmean.size()) != cols || !grid.fits(rows, cols)) return std::nullopt;
  return quantize_weighted(grid, w, rows, cols, st->sqmean.data());
}

std::string WeightCalibration::describe() const {
  std::string s;
  if (smooth_ && a_.alpha_auto)
    s += fmt::format("smoothquant alpha searched per site ({} chunks of {}; max|x| from {} tokens of {}); ",
                     a_.search_chunks, std::filesystem::path(a_.calib_text).filename().string(), smooth_->tokens,
                     smooth_->text);
  else if (smooth_)
    s += fmt::format("smoothquant alpha {} ({} tokens of {}); ", a_.alpha, smooth_->tokens, smooth_->text);
  if (a_.awq)
    s += fmt::format("awq scale{} search ({} chunks of {}); ", a_.no_clip ? "" : " and clip", a_.search_chunks,
                     std::filesystem::path(a_.calib_text).filename().string());
  if (a_.gptq)
    s += fmt::format("gptq{}{}{} ({} chunks of {} tokens of {}); ",
                     a_.refit_groups ? " act-order refit-groups"
                     : a_.act_order  ? " act-order"
                                     : "",
                     a_.gptq_refine > 0 ? fmt::format(" refine {}", a_.gptq_refine) : std::string(),
                     a_.gptq_damp != 0.01 ? fmt::format(" damp {}", a_.gptq_damp) : std::string(), a_.calib_chunks,
                     a_.calib_ctx, std::filesystem::path(a_.calib_text).filename().string());
  if (imatrix_) s += fmt::format("imatrix ({} tokens of {}); ", imatrix_->tokens, imatrix_->text);
  if (imatrix_ && imatrix_->experts_with_few_tokens > 0)
    s += fmt::format("{} expert inputs below {} routed tokens lean on their layer's expert average; ",
                     imatrix_->experts_with_few_tokens, kExpertPriorTokens);
  if (!s.empty()) s.resize(s.size() - 2);
  return s;
}

}  // namespace qt::calib
