// `convert --awq` and `convert --smooth STATS --alpha auto`: per-channel scales chosen per fold
// site on calibration activations (scale_search.h) and folded exactly into the checkpoint
// (smoothquant.h's FoldSite / ScaleFolder), before the weights are quantized.
//
// One float pass over the calibration chunks, block by block (the block's inputs come from the
// float blocks before it: scaling is exact, so they are the same for the folded model; AWQ's
// reference also feeds each block the float outputs of the previous one). For each site of the
// block — q/k/v ← input_layernorm, o_proj ← v_proj, gate/up ← post_attention_layernorm,
// down_proj ← up_proj — the readers' inputs are cached and the ratio α searched:
//   AWQ:         s = mean|X|^α normalised (α ∈ {0, 0.05, …, 0.95}, arXiv 2306.00978 §3.2)
//   SmoothQuant: s = max|X|^α / max|W|^(1−α) (α ∈ {0, 0.05, …, 1}; max|X| from the act-stats file)
// Readers the plan does not quantize count as float. Then (AWQ) every quantized reader except
// q_proj / k_proj gets the clip search in the scaled basis, and its weight is clamped.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "calib/act_stats.h"
#include "calib/sequential.h"
#include "calib/smoothquant.h"
#include "formats/checkpoint.h"
#include "libquant/schemes/scheme.h"

namespace qt::calib {

struct ScaleFoldOptions {
  bool awq = true;                  // false: SmoothQuant's rule (needs stats)
  bool clip = true;                 // AWQ's clip search after scaling
  const ActStats* stats = nullptr;  // SmoothQuant: max|X_j| per reader
  SmoothOptions sites;              // which exact folds (v→o, up→down)
  SequentialOptions seq;            // chunks of calibration text
};

// The scales of every reader's columns (its input is now X_j / s_j), by weight name.
std::map<std::string, std::vector<float>> search_and_fold(Checkpoint& ck,
                                                          const std::map<std::string, SchemeParams>& plan,
                                                          const std::vector<int32_t>& tokens,
                                                          const ScaleFoldOptions& opt);

}  // namespace qt::calib
