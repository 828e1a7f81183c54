// `convert --target-bpw B`: each 2-D weight's storage chosen to meet B bits per weight (over the
// quantized 2-D weights, embedding and output included, every stored byte counted) at the least
// estimated loss. The layout supplies the candidates (calib/gguf_target.h: ggml types;
// calib/mlx_target.h: mlx affine bits × group); measuring and choosing are the same for both.
//
// Per weight and per candidate that fits it, the weight is quantized exactly as the export will
// (with the --imatrix importances where the export uses them) and its importance-weighted squared
// error E = Σ_rows Σ_j imp_j (w − ŵ)² taken: the expected ‖ΔW x‖² of that projection's output
// under the calibration inputs' diagonal second moment. E of different projections is not in the
// same units of loss (a query's error goes through a softmax, the head's straight into the
// logits), so with calibration tokens each weight's sensitivity s = KLD / E is measured once: the
// KL divergence of the model's next-token distributions (positions ctx/2 … ctx−1 of each chunk,
// as llama-perplexity scores) when that weight alone is at the probe candidate (a 4-bit one),
// over its E there. A weight's estimated loss at a candidate is then s · E (KLD is to first order
// quadratic in the weight error, so linear in E; the weights' contributions add). Without tokens
// the loss is E itself. calib/type_choice.h picks the candidates.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"

namespace qt::calib {

// What a layout can store a weight as.
struct TargetCandidates {
  // The candidates' names, in a fixed order (the same index the same candidate for every weight
  // that has them all: type_choice compares uniform plans by index).
  std::vector<std::string> names;
  // The candidates whose KLD measures the sensitivity: a weight's first one that fits it.
  std::vector<std::string> probes;
  // Whether candidate k fits a [rows, cols] weight.
  std::function<bool(size_t k, int64_t rows, int64_t cols)> fits;
  // Weight `hf` (w, fp32 [rows, cols]) quantized at candidate k exactly as the export does, back
  // to fp32; `bytes` gets what the export stores for it. `imp`: its importances, or null.
  std::function<std::vector<float>(size_t k, const std::string& hf, const std::vector<float>& w, int64_t rows,
                                   int64_t cols, const float* imp, uint64_t* bytes)>
      round_trip;
  // The weight's name in the layout (the GGUF name; the HF name for mlx), for the plan.
  std::function<std::string(const std::string& hf)> label;
};

struct TargetOptions {
  // The importance of a weight's input channels (convert's --imatrix), null for none.
  std::function<const float*(const std::string& hf_name, int64_t cols)> importance;
  // Calibration tokens for the sensitivities; empty: the weighted error alone is the loss.
  std::vector<int32_t> tokens;
  int ctx = 512, chunks = 4;
  int32_t bos_id = -1;
  bool progress = false;  // a progress line on stderr
};

struct TargetWeight {
  std::string hf, label;
  int64_t rows = 0, cols = 0;
  std::vector<std::string> cands;  // the candidates that fit, in TargetCandidates' order
  std::vector<uint64_t> bytes;
  std::vector<double> err;  // E at each candidate
  double sensitivity = 1;   // s (1 without tokens)
  int pick = -1;            // the chosen candidate
};

struct TargetPlan {
  std::vector<TargetWeight> weights;  // in the order given
  uint64_t bytes = 0, elements = 0;   // of the 2-D weights as the layout stores them
  double loss = 0;                    // Σ s · E at the chosen candidates
  double bpw() const { return elements ? 8.0 * double(bytes) / double(elements) : 0; }
};

// `hf_names`: the 2-D weights the layout quantizes, by HF name. The checkpoint's tensors must be
// materialized when tokens are given (the model is run). UserError: a weight no candidate fits.
std::vector<TargetWeight> measure_target(const Checkpoint& ck, const std::vector<std::string>& hf_names,
                                         const TargetCandidates& cands, const TargetOptions& opt);

// The candidates for `bpw` from measured weights, among `allowed` names (empty: every candidate).
// UserError: B outside what the candidates reach (naming the range), a weight no allowed one fits.
TargetPlan choose_target(std::vector<TargetWeight> weights, double bpw, const std::vector<std::string>& allowed = {});

// The measurements as JSON and back (convert --measurements: several B from one measurement).
// `from` refuses (UserError naming `what`) a file whose weights are not `hf_names` or that names
// a candidate not in `cands`.
nlohmann::json target_to_json(const std::vector<TargetWeight>& weights);
std::vector<TargetWeight> target_from_json(const nlohmann::json& j, const std::vector<std::string>& hf_names,
                                           const TargetCandidates& cands, const std::string& what);

// The candidate holding the most bytes of the plan.
std::string target_main_candidate(const TargetPlan& plan);

}  // namespace qt::calib
