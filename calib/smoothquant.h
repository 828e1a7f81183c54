// SmoothQuant (arXiv 2211.10438; docs/spec/calibration.md §SmoothQuant; Cider's
// tools/smoothquant.py): per input channel j of a group of projections that read the same
// activation X,
//   s_j = max|X_j|^α / max_rows|W_j|^(1−α)        (max|W_j| over every reading projection's rows)
// and the model is rewritten exactly: X_j / s_j comes out of the producer, W[:, j] · s_j goes into
// each reader, so X·Wᵀ is unchanged while activation outliers move into the weights.
//   q/k/v  ← input_layernorm            (norm weight γ_j / s_j)
//   gate/up ← post_attention_layernorm
//   o_proj ← v_proj  (v's output rows / s, o's columns · s; with grouped-query attention one v
//                     row feeds n_heads/n_kv_heads o columns, so s is shared by them: their
//                     largest |X| and |W|; a v bias is divided too)
//   down   ← up_proj (up's rows / s, down's columns · s; exact since the product with
//                     silu(gate) is elementwise)
// A scale is clamped to [1e-5, 1e5] and set to 1 where a channel's |X| or |W| is zero. The
// rewritten checkpoint computes the same logits up to fp32 rounding (tests/test_calibrated_quant.cpp).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "calib/act_stats.h"
#include "formats/checkpoint.h"

namespace qt::calib {

struct SmoothOptions {
  double alpha = 0.5;
  bool fold_vo = true;       // o_proj ← v_proj
  bool fold_up_down = true;  // down_proj ← up_proj
};

// One place where a per-channel scale folds exactly: the producer of the readers' input (a norm's
// weight, or v_proj / up_proj, whose output rows are the channels) is divided by s, each reader's
// input columns are multiplied by s. Under grouped-query attention an o_proj column c reads v
// channel scale_index[c], so the n_scales (= KV width) scales are shared by those columns.
struct FoldSite {
  std::string producer;  // its weight (a norm) or output rows (+ bias) ÷ s
  bool producer_is_norm = false;
  std::vector<std::string> readers;  // weights whose columns × s; readers[0] names the statistics
  std::vector<int64_t> rows;         // output rows of each reader
  int64_t cols = 0;                  // the readers' input width
  int64_t n_scales = 0;              // cols, or the KV width for o_proj under GQA
  std::vector<int64_t> scale_index;  // column -> scale; empty: the identity
};
// The sites of block `layer` in this order: q/k/v ← input_layernorm, o_proj ← v_proj (when
// opt.fold_vo), gate/up ← post_attention_layernorm, down_proj ← up_proj (when opt.fold_up_down).
std::vector<FoldSite> fold_sites(const ModelConfig& c, int layer, const SmoothOptions& opt);
// Per-column figures reduced to the site's scales (max over the columns sharing one), and back.
std::vector<float> to_scale_space(const FoldSite& site, const std::vector<float>& per_column);
std::vector<float> to_columns(const FoldSite& site, const std::vector<float>& scales);
// max over rows of |W[r, j]| for every column j, folded into acc (acc sized to cols on first use).
void col_absmax(const float* W, int64_t rows, int64_t cols, std::vector<float>& acc);

// Rewrites a checkpoint's tensors through owned fp32 copies: fold() divides a site's producer
// and multiplies its readers; finish() stores every rewritten tensor back into the checkpoint.
class ScaleFolder {
 public:
  explicit ScaleFolder(Checkpoint& ck) : ck_(ck) {}
  std::vector<float>& weight(const std::string& name);                // the owned fp32 copy (made on first use)
  void fold(const FoldSite& site, const std::vector<float>& scales);  // scales: n_scales
  void finish();

 private:
  Checkpoint& ck_;
  std::map<std::string, std::vector<float>> m_;
};

// s_j = a_j^α / w_j^(1−α) with the clamps above (a: activation absmax, w: weight column absmax).
std::vector<float> smooth_scales(const std::vector<float>& act_absmax, const std::vector<float>& w_absmax,
                                 double alpha);

// Rewrites the norms and projections of every block of `ck` (float tensors become owned fp32;
// the others are untouched). Returns, per rewritten projection, the scales s of its input
// channels (its input is now X_j / s_j). UserError when `stats` lacks a projection of the model.
std::map<std::string, std::vector<float>> smooth_checkpoint(Checkpoint& ck, const ActStats& stats,
                                                            const SmoothOptions& opt);

}  // namespace qt::calib
