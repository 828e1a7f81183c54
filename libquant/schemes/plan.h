// Which tensors of a checkpoint get which scheme parameters (convert's --scheme, --bits,
// --group-size, --recipe, --embedding-bits, --lm-head-bits):
//   1. the scheme's defaults (its row as the output layout stores it), then --bits / --group-size;
//   2. the recipe's rules, in file order: every rule whose pattern matches the tensor name
//      applies, so a later rule overrides an earlier one (last match wins; recipe.h);
//   3. --embedding-bits (model.embed_tokens.weight) and --lm-head-bits (lm_head.weight) last:
//      a flag on the command line beats the file.
// Only 2-D ".weight" tensors (the Linear weights and the embedding) are candidates; norms and
// biases are never quantized, nor the embedding and head where the layout keeps them float. A
// candidate whose rows the group size does not divide is left unquantized, as mlx_lm does
// (strict refuses instead).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/layouts/output_layout.h"
#include "libquant/schemes/recipe.h"
#include "libquant/schemes/scheme.h"

namespace qt {

struct QuantRequest {
  std::string scheme;                                                 // empty: no quantization
  std::string recipe;                                                 // a file or a preset name (resolve_recipe)
  int bits = -1, group = -1, embedding_bits = -1, lm_head_bits = -1;  // -1: not given
  bool strict = false;                                                // refuse a weight the group size does not fit
  bool untie = false;  // write a separate lm_head.weight for a tied model
};

struct QuantPlan {
  std::map<std::string, SchemeParams> tensors;  // weight name -> its parameters
  std::map<std::string, std::string> skipped;   // candidate left unquantized -> why
};

// The output layout a scheme goes to when --format is not given (its row's first layout; hf
// without a scheme).
std::string default_layout(const std::string& scheme);

class QuantPlanner {
 public:
  // Checks every flag and recipe rule before any tensor is looked at (UserError, one line).
  // `source_dir`: where recipe presets are looked up (resolve_recipe).
  QuantPlanner(const QuantRequest& r, const OutputLayout& layout, const std::string& source_dir);
  bool active() const { return active_; }
  // The dtype of the source weights and of the scales the layouts store in it (--dtype).
  void set_dtype(DType d) { base_.dtype = d; }

  // The plan for ck's tensors; unties ck's head first when asked (--untie).
  QuantPlan plan(Checkpoint& ck);

 private:
  QuantRequest r_;
  const OutputLayout* layout_;
  SchemeParams base_;
  std::vector<RecipeRule> rules_;
  bool active_ = false;
};

// "quantized N tensors: SCHEME B-bit group G" and "left unquantized: NAME (why)" lines; a reason
// shared by kSummaryCollapse tensors or more is one line, "left unquantized: N tensors, FIRST ... LAST (why)".
constexpr size_t kSummaryCollapse = 64;
std::vector<std::string> plan_summary(const QuantPlan& plan);

}  // namespace qt
