// `convert --format mlx --scheme affine --target-bpw B` (calib/target_bpw.h): the mlx candidates.
// Each 2-D weight's affine bits (2, 3, 4, 5, 6, 8) and group size (32, 64, 128), as mlx_lm stores
// a mixed-precision model (a {"bits", "group_size"} entry per module in config.json's
// "quantization"); quantized by the export's own quantizer (the --imatrix weighted fit where it
// applies, RTN otherwise), bytes = codes + scales + biases in the output dtype; the sensitivity
// probed at 4 bits, group 64 (32 where 64 does not divide the rows). With --gptq the plan is chosen on these measurements first and
// GPTQ then runs at each weight's chosen bits and group.
#pragma once
#include <string>

#include "calib/target_bpw.h"
#include "calib/weight_calibration.h"

namespace qt::calib {

// The candidates, named "b4g64" (bits, group). `calib` quantizes (it must outlive the result);
// `dtype`: the stored scales' and biases' dtype (convert's --dtype).
TargetCandidates mlx_target_candidates(const WeightCalibration& calib, DType dtype);

// The plan as the text of a convert --recipe file (libquant/schemes/recipe.h): one rule a line
// per weight, its HF name with its bits and group size.
std::string mlx_target_recipe(const TargetPlan& plan, const std::string& comment);

}  // namespace qt::calib
