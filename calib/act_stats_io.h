// The act-stats file (`calibrate --method act-stats` writes it, convert --smooth / --imatrix read
// it): safetensors, "<weight name>.absmax" and "<weight name>.sqmean", F32 [in_features];
// __metadata__: {"format": "quanttool-act-stats", "tokens": N, "text": file name} and, for a mixture
// of experts whose calibration text reached some experts little, "experts_with_few_tokens".
#pragma once
#include <string>

#include "calib/act_stats.h"

namespace qt::calib {

void save_act_stats(const std::string& path, const ActStats& s);
// Also reads llama.cpp's imatrix files, GGUF or legacy .dat (calib/llama_imatrix.h: sqmean only,
// absmax empty). UserError "PATH: ..." for a file that is none of these.
ActStats load_act_stats(const std::string& path);

}  // namespace qt::calib
