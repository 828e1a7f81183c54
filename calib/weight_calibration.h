// What `convert` does with the calibration flags (docs/calibration.md):
//   --smooth STATS [--alpha A]   SmoothQuant scales folded into the checkpoint before quantizing
//   --imatrix STATS              importance-weighted group parameters (weighted_fit.h)
//   --smooth STATS --alpha auto --calib TEXT
//                                α searched per fold site on the text's activations (scale_fold.h)
//   --awq --calib TEXT [--search-chunks N] [--no-clip]
//                                AWQ's scale and clip search, folded like SmoothQuant (scale_fold.h)
//   --gptq --calib TEXT [--calib-chunks N] [--act-order]
//                                sequential GPTQ over the calibration text (gptq.h, sequential.h);
//                                with --imatrix the group parameters use the weighted search too;
//                                --gptq-refine N: then N sweeps of descent on the output error (gptq_refine.h);
//                                --gptq-damp F: the dampening, F·mean(diag H) (default 0.01)
// Tensors no method reaches (the embedding of an untied model, a shape the grid does not fit) are
// quantized by the scheme's plain RTN rule.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "calib/act_stats.h"
#include "calib/gptq.h"
#include "calib/smoothquant.h"
#include "formats/checkpoint.h"
#include "libquant/schemes/scheme.h"

namespace qt::calib {

struct WeightCalibArgs {
  std::string smooth, imatrix, calib_text;
  bool gptq = false, act_order = false, refit_groups = false, awq = false, no_clip = false;
  double alpha = 0.5;
  bool alpha_auto = false;
  int calib_chunks = 64, calib_ctx = 512, search_chunks = 8;
  int gptq_refine = 0;
  double gptq_damp = 0.01;
};

class WeightCalibration {
 public:
  // Checks the flags and reads the statistics files; UserError (one line) on a bad combination.
  explicit WeightCalibration(const WeightCalibArgs& a);
  bool active() const { return smooth_ || imatrix_ || a_.gptq || a_.awq; }

  // Before planning (always called): SmoothQuant with a fixed α rewrites ck's norms and projections.
  void prepare(Checkpoint& ck);
  // After planning: the searched scales (--awq, --alpha auto) are folded into ck, which depends on
  // each tensor's scheme; then fused projections get their shared global scales in plan
  // (share_fused_global_scales, from the folded weights); then GPTQ runs over the planned tensors
  // (sequential pass over the text).
  void run(Checkpoint& ck, std::map<std::string, SchemeParams>& plan);
  // The calibrated packed tensor of `name`, or nullopt when no method applies (RTN then).
  std::optional<PackedTensor> quantize(const std::string& name, const float* w, int64_t rows, int64_t cols,
                                       const SchemeParams& p) const;
  // One line per method for the output's description (the quantization_config / report).
  std::string describe() const;

 private:
  WeightCalibArgs a_;
  std::optional<ActStats> smooth_, imatrix_;
  bool embedding_is_head_ = false;  // set by prepare: the embedding table is the output head too
  std::map<std::string, PackedTensor> gptq_done_;
  // The calibration text's tokens (--calib), read once for the searches and GPTQ.
  const std::vector<int32_t>& calib_tokens(const Checkpoint& ck);
  std::vector<int32_t> tokens_;
  // imatrix statistics follow a folded projection's input, X_j / s_j.
  void rescale_imatrix(const std::map<std::string, std::vector<float>>& scales);
};

}  // namespace qt::calib
