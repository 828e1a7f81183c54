// What `convert` does with the calibration flags (README "Calibrated quantization"):
//   --smooth STATS [--alpha A]   SmoothQuant scales folded into the checkpoint before quantizing
//   --imatrix STATS              importance-weighted group parameters (weighted_fit.h)
//   --gptq --calib TEXT [--calib-chunks N] [--act-order]
//                                sequential GPTQ over the calibration text (gptq.h, sequential.h);
//                                with --imatrix the group parameters use the weighted search too
// Tensors no method reaches (the embedding of an untied model, a shape the grid does not fit) are
// quantized by the scheme's RTN rule as before.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "calib/act_stats.h"
#include "calib/gptq.h"
#include "calib/smoothquant.h"
#include "formats/checkpoint.h"
#include "libquant/schemes/scheme.h"

namespace qt::calib {

struct WeightCalibArgs {
  std::string smooth, imatrix, calib_text;
  bool gptq = false, act_order = false;
  double alpha = 0.5;
  int calib_chunks = 64, calib_ctx = 512;
};

class WeightCalibration {
 public:
  // Checks the flags and reads the statistics files; UserError (one line) on a bad combination.
  explicit WeightCalibration(const WeightCalibArgs& a);
  bool active() const { return smooth_ || imatrix_ || a_.gptq; }

  // Before planning: SmoothQuant rewrites ck's norms and projections.
  void prepare(Checkpoint& ck);
  // After planning: runs GPTQ over the planned tensors (sequential pass over the text).
  void run(const Checkpoint& ck, const std::map<std::string, SchemeParams>& plan);
  // The calibrated packed tensor of `name`, or nullopt when no method applies (RTN then).
  std::optional<PackedTensor> quantize(const std::string& name, const float* w, int64_t rows, int64_t cols,
                                       const SchemeParams& p) const;
  // One line per method for the output's description (the quantization_config / report).
  std::string describe() const;

 private:
  WeightCalibArgs a_;
  std::optional<ActStats> smooth_, imatrix_;
  std::map<std::string, PackedTensor> gptq_done_;
};

}  // namespace qt::calib
