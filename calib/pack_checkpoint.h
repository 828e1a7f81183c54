// A checkpoint quantized by a plan (libquant/schemes/plan.h), ready for an output layout's writer:
// the planned weights replaced by their stored tensors under the layout's names, the rest as
// loaded, and the normalized description in `quantization`. The weights are quantized lazily:
// each stored tensor is deferred, and the writer's first read of one of a weight's tensors
// quantizes that weight (calibrated where `calib` applies, RTN otherwise), so only the writer's
// current batch is ever held quantized.
#pragma once
#include "calib/weight_calibration.h"
#include "formats/checkpoint.h"
#include "formats/layouts/output_layout.h"
#include "libquant/schemes/plan.h"

namespace qt::calib {

// Runs the calibration passes that need the plan (calib.run) first. `calib` must outlive the
// returned checkpoint's deferred tensors.
Checkpoint pack_checkpoint(Checkpoint ck, const QuantPlan& plan, const OutputLayout& layout, WeightCalibration& calib);

// `convert --vision-bits`: a vision-language model's vision tower and projector (ck.multimodal's
// passthrough) quantized by `p` (plain rounding, deferred like the rest) where a quantized module
// can hold them: the 2-D ".weight"s of Linears and Embeddings whose rows p's group divides; the
// others stay as stored. Their entries go to ck.quantization["vision"] (stored name -> entry) for
// the writer's config. Returns how many weights it quantized.
int pack_vision_tower(Checkpoint& ck, const SchemeParams& p, const OutputLayout& layout);

}  // namespace qt::calib
