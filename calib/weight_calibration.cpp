#include "calib/weight_calibration.h"

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "calib/sequential.h"
#include "calib/weighted_fit.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "libquant/schemes/grid.h"

namespace qt::calib {

WeightCalibration::WeightCalibration(const WeightCalibArgs& a) : a_(a) {
  if (!(a.alpha >= 0 && a.alpha <= 1)) user_error("--alpha: must be in [0, 1], got {}", a.alpha);
  if (a.gptq && a.calib_text.empty()) user_error("--gptq: give the calibration text with --calib TEXT");
  if (!a.gptq && (!a.calib_text.empty() || a.act_order)) user_error("--calib, --act-order: need --gptq");
  if (a.calib_chunks <= 0) user_error("--calib-chunks: must be positive, got {}", a.calib_chunks);
  if (!a.calib_text.empty() && !std::filesystem::is_regular_file(a.calib_text))
    user_error("--calib {}: no such file", a.calib_text);
  if (!a.calib_text.empty() && std::filesystem::path(a.calib_text).filename().string().find("test") != std::string::npos)
    user_error("--calib {}: that is test text; calibrate on wiki.valid.tokens.txt", a.calib_text);
  if (!a.smooth.empty()) smooth_ = load_act_stats(a.smooth);
  if (!a.imatrix.empty()) imatrix_ = a.imatrix == a.smooth ? smooth_ : load_act_stats(a.imatrix);
}

void WeightCalibration::prepare(Checkpoint& ck) {
  if (!smooth_) return;
  SmoothOptions o;
  o.alpha = a_.alpha;
  const auto scales = smooth_checkpoint(ck, *smooth_, o);
  // The statistics were taken on the unsmoothed model; a smoothed projection reads X_j / s_j.
  if (imatrix_)
    for (auto& [name, s] : scales)
      if (auto it = imatrix_->linears.find(name); it != imatrix_->linears.end())
        for (size_t j = 0; j < s.size(); ++j) it->second.absmax[j] /= s[j], it->second.sqmean[j] /= s[j] * s[j];
}

void WeightCalibration::run(const Checkpoint& ck, const std::map<std::string, SchemeParams>& plan) {
  if (!a_.gptq) return;
  if (!ck.tokenizer) user_error("--gptq: {} has no tokenizer to read the calibration text with", ck.path);
  std::set<std::string> targets;
  for (auto& [name, p] : plan) {
    if (name == "model.embed_tokens.weight" && !(ck.config.tie_word_embeddings || !ck.has("lm_head.weight")))
      continue;  // an untied embedding is a lookup table: no input, RTN
    if (!SchemeGrid(p).fits(ck.get(name).shape[0], ck.get(name).shape[1])) continue;
    if (getenv("QT_GPTQ_NOHEAD") && (name == "model.embed_tokens.weight" || name == "lm_head.weight")) continue;
    targets.insert(name);
  }
  MappedFile mf = map_file(a_.calib_text);
  const std::vector<int32_t> ids =
      ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), mf.size), true);
  SequentialOptions so;
  so.ctx = a_.calib_ctx;
  so.chunks = a_.calib_chunks;
  so.bos_id = ck.tokenizer->add_bos() ? ck.tokenizer->bos_id() : -1;
  GptqOptions go;
  go.act_order = a_.act_order;
  go.weighted_groups = imatrix_.has_value();
  std::string prepared_site;  // the last site's prepared Hessian serves its other projections
  GptqHessian prepared;
  gptq_done_ = quantize_sequential(ck, targets, ids, so,
                                   [&](const std::string& name, const std::vector<float>& w, int64_t rows,
                                       int64_t cols, const std::vector<float>& H, const std::string& site) {
                                     if (site != prepared_site) prepared = prepare_gptq_hessian(H, cols, go), prepared_site = site;
                                     return gptq_quantize(SchemeGrid(plan.at(name)), w.data(), rows, cols, prepared, go);
                                   });
}

std::optional<PackedTensor> WeightCalibration::quantize(const std::string& name, const float* w, int64_t rows,
                                                        int64_t cols, const SchemeParams& p) const {
  if (auto it = gptq_done_.find(name); it != gptq_done_.end()) return it->second;  // read-only: callers run in parallel
  if (!imatrix_) return std::nullopt;
  const ChannelStats* st = imatrix_->find(name);
  const SchemeGrid grid(p);
  if (!st || int64_t(st->sqmean.size()) != cols || !grid.fits(rows, cols)) return std::nullopt;
  return quantize_weighted(grid, w, rows, cols, st->sqmean.data());
}

std::string WeightCalibration::describe() const {
  std::string s;
  if (smooth_) s += fmt::format("smoothquant alpha {} ({} tokens of {}); ", a_.alpha, smooth_->tokens, smooth_->text);
  if (a_.gptq)
    s += fmt::format("gptq{} ({} chunks of {} tokens of {}); ", a_.act_order ? " act-order" : "", a_.calib_chunks,
                     a_.calib_ctx, std::filesystem::path(a_.calib_text).filename().string());
  if (imatrix_) s += fmt::format("imatrix ({} tokens of {}); ", imatrix_->tokens, imatrix_->text);
  if (!s.empty()) s.resize(s.size() - 2);
  return s;
}

}  // namespace qt::calib
