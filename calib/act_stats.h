// Activation statistics of every Linear's input over calibration text (`calibrate --method
// act-stats`): per input channel j, max |x_j| (SmoothQuant, AWQ) and mean x_j² (the importance
// matrix: the diagonal of the GPTQ Hessian XᵀX / n, what llama.cpp's imatrix holds), keyed by the
// Linear's weight name ("model.layers.3.mlp.down_proj.weight", "lm_head.weight"). Projections
// that share an input (q/k/v, gate/up) each get the same figures. A mixture of experts' expert
// sees only its routed tokens: its figures are over those, with the prior of calib/expert_prior.h.
// Files: calib/act_stats_io.h.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "libquant/model/llama.h"

namespace qt::calib {

struct ChannelStats {
  std::vector<float> absmax;  // max |x_j|
  std::vector<float> sqmean;  // mean x_j²
  int64_t tokens = 0;         // the rows behind them (an expert's: those routed to it); 0 when not known
};

struct ActStats {
  std::map<std::string, ChannelStats> linears;  // by weight name
  int64_t tokens = 0;
  std::string text;  // the calibration text's file name
  // Expert inputs (gate, down) the router sent fewer than kExpertPriorTokens tokens
  // (calib/expert_prior.h): their statistics lean on the layer's expert average.
  int experts_with_few_tokens = 0;
  // A llama.cpp imatrix's merged-expert entries by its name ("blk.3.ffn_up_exps.weight"), one
  // ChannelStats per expert (one for all of them from a legacy .dat, which keeps no per-expert
  // counts), until calib/llama_imatrix.h's resolve_expert_slices names them after a model's experts.
  std::map<std::string, std::vector<ChannelStats>> expert_slices;

  // Whether the max |x_j| are known (llama.cpp's imatrix files hold only the mean squares).
  bool has_absmax() const { return !linears.empty() && !linears.begin()->second.absmax.empty(); }

  // The statistics of the weight `name`; nullptr when absent. Where the embedding table doubles
  // as the output head (embedding_is_head: a tied model, libquant/model/block_tensors.h's
  // head_is_embedding), "model.embed_tokens.weight" answers with lm_head's; an untied embedding is
  // a lookup table whose input is no activation, so it has none.
  const ChannelStats* find(const std::string& name, bool embedding_is_head) const;
};

// The first `chunks` chunks of `ctx` tokens (each starting with bos_id when ≥ 0) through the
// model (full-precision cache); every Linear's input is observed, the output head's too.
ActStats collect_act_stats(LlamaModel& model, const std::vector<int32_t>& tokens, int ctx, int chunks, int32_t bos_id);

}  // namespace qt::calib
