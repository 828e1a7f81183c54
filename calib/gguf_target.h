// `convert --format gguf --target-bpw B`: each 2-D weight's GGUF type chosen to meet B bits per
// weight (over the 2-D weights, embedding and output included, as the mixes' bpw is reported)
// at the least estimated loss.
//
// Per weight and per candidate type whose block divides its rows (Q4_0, IQ4_NL, Q4_1, Q5_0,
// Q5_1, Q8_0; with rows a multiple of 256 also Q2_K, Q3_K, IQ4_XS, Q4_K, Q5_K, Q6_K) the weight
// is quantized exactly as the export will (ggml_quantize_weighted with its --imatrix
// importances) and its importance-weighted squared error E = Σ_rows Σ_j imp_j (w − ŵ)² taken:
// the expected ‖ΔW x‖² of that projection's output under the calibration inputs' diagonal
// second moment. E of different projections is not in the same units of loss (a query's error
// goes through a softmax, the head's straight into the logits), so with calibration tokens each
// weight's sensitivity s = KLD / E is measured once: the KL divergence of the model's
// next-token distributions (positions ctx/2 … ctx−1 of each chunk, as llama-perplexity scores)
// when that weight alone is Q4_0, over its E at Q4_0. A weight's estimated loss at a type is
// then s · E (KLD is to first order quadratic in the weight error, so linear in E; the weights'
// contributions add). Without tokens the loss is E itself. calib/type_choice.h picks the types.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/ggml_blocks.h"

namespace qt::calib {

struct GgufTargetOptions {
  // The importance of a weight's input channels (convert's --imatrix), null for none.
  std::function<const float*(const std::string& hf_name, int64_t cols)> importance;
  // Calibration tokens for the sensitivities; empty: the weighted error alone is the loss.
  std::vector<int32_t> tokens;
  int ctx = 512, chunks = 4;
  int32_t bos_id = -1;
  bool progress = false;  // a progress line on stderr
};

struct GgufTargetWeight {
  std::string hf, gguf;
  int64_t rows = 0, cols = 0;
  std::vector<GgmlType> types;  // candidates, in kTargetTypes' order
  std::vector<uint64_t> bytes;
  std::vector<double> err;  // E at each candidate
  double sensitivity = 1;   // s (1 without tokens)
  int pick = -1;            // the chosen candidate
};

struct GgufTargetPlan {
  std::vector<GgufTargetWeight> weights;  // in the order given
  uint64_t bytes = 0, elements = 0;       // of the 2-D weights as the GGUF stores them
  double loss = 0;                        // Σ s · E at the chosen types
  double bpw() const { return elements ? 8.0 * double(bytes) / double(elements) : 0; }
};

// `hf_names`: the 2-D weights the GGUF holds (gguf_weight_types' keys), by HF name. The
// checkpoint's tensors must be materialized when tokens are given (the model is run).
// UserError: a weight no candidate fits. opt.bpw is not used.
std::vector<GgufTargetWeight> measure_gguf_target(const Checkpoint& ck, const std::vector<std::string>& hf_names,
                                                  const GgufTargetOptions& opt);

// The candidate types measured, in order (convert --target-types chooses among a subset).
const std::vector<GgmlType>& gguf_target_types();

// The types for `bpw` from measured weights, among `allowed` (empty: every candidate).
// UserError: B outside what the candidates reach (naming the range), a weight no allowed type fits.
GgufTargetPlan choose_gguf_target(std::vector<GgufTargetWeight> weights, double bpw,
                                  const std::vector<GgmlType>& allowed = {});

// The measurements as JSON and back (convert --measurements: several B from one measurement).
// `from` refuses (UserError naming `what`) a file whose weights are not `hf_names`.
nlohmann::json gguf_target_to_json(const std::vector<GgufTargetWeight>& weights);
std::vector<GgufTargetWeight> gguf_target_from_json(const nlohmann::json& j, const std::vector<std::string>& hf_names,
                                                    const std::string& what);

// The plan as `--tensor-type` lines, one per weight: ^blk\.0\.attn_q\.weight$=q4_1.
std::vector<std::string> gguf_target_recipe(const GgufTargetPlan& plan);

// The type holding the most bytes of the plan (lower-case name, e.g. "q4_1"): the file's
// general.file_type when --gguf-type is not given.
std::string gguf_target_main_type(const GgufTargetPlan& plan);

}  // namespace qt::calib
