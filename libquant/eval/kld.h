// KL divergence of a model's next-token distributions against a baseline's, with the statistics
// llama.cpp's `llama-perplexity --kl-divergence` prints (tools/perplexity/perplexity.cpp,
// kl_divergence(); docs/spec/perplexity.md §KL divergence) — computed exactly from both models'
// fp32 logits over the whole vocabulary, where llama.cpp reads the baseline back from
// uint16-quantized log-probs and skips entries with log p_base ≤ −16.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qt {

// One scored position of the test model against the baseline.
struct KldToken {
  double nll = 0;         // −log p_test(target)
  double nll_base = 0;    // −log p_base(target)
  double kld = 0;         // Σ_v p_base (log p_base − log p_test)
  bool same_top = false;  // argmax test == argmax base
};

// Compares one row of logits (n_vocab each) for the target token.
KldToken kld_token(const float* base_logits, const float* test_logits, int n_vocab, int target);

// The final summary llama.cpp prints ("====== Perplexity statistics ======" and after).
struct KldSummary {
  int64_t count = 0;
  double ppl = 0, ppl_err = 0;            // Mean PPL(Q)
  double ppl_base = 0, ppl_base_err = 0;  // Mean PPL(base)
  double cor = 0;                         // Cor(ln PPL(Q), ln PPL(base))
  double ln_ratio = 0, ln_ratio_err = 0;  // Mean ln(PPL(Q)/PPL(base))
  double ratio = 0, ratio_err = 0;        // Mean PPL(Q)/PPL(base)
  double diff = 0, diff_err = 0;          // Mean PPL(Q)-PPL(base)
  double kld = 0, kld_err = 0;            // Mean KLD
  double kld_max = 0, kld_p999 = 0, kld_p99 = 0, kld_p95 = 0, kld_p90 = 0, kld_median = 0, kld_p10 = 0, kld_p5 = 0,
         kld_p1 = 0, kld_p01 = 0, kld_min = 0;
  double dp = 0, dp_err = 0;  // Mean Δp = p_test(target) − p_base(target), as fractions
  double dp_max = 0, dp_p999 = 0, dp_p99 = 0, dp_p95 = 0, dp_p90 = 0, dp_p75 = 0, dp_median = 0, dp_p25 = 0, dp_p10 = 0,
         dp_p5 = 0, dp_p1 = 0, dp_p01 = 0, dp_min = 0;
  double rms_dp = 0, rms_dp_err = 0;
  double same_top = 0, same_top_err = 0;  // fraction of positions whose argmax agree
};

// Running sums in llama.cpp's kl_divergence_result form, plus the per-token values for the
// percentiles. add() in a fixed order gives results independent of the thread count.
class KldAccumulator {
 public:
  void add(const KldToken& t);
  int64_t count() const { return count_; }
  KldSummary summary() const;  // percentiles need count ≥ 1; llama.cpp prints them from 100 on

 private:
  double sum_nll_ = 0, sum_nll2_ = 0, sum_nll_base_ = 0, sum_nll_base2_ = 0, sum_nll_nll_base_ = 0;
  double sum_kld_ = 0, sum_kld2_ = 0, sum_p_diff_ = 0, sum_p_diff2_ = 0, sum_p_diff4_ = 0;
  int64_t n_same_top_ = 0, count_ = 0;
  std::vector<float> kld_values_, p_diff_values_;
};

// llama.cpp's helpers: mean and its standard error from sums (0 error for count ≤ 10), and the
// covariance of two means (0 for count < 10).
struct MeanErr {
  double mean = 0, err = 0;
};
MeanErr mean_and_uncertainty(double sum, double sum2, int64_t count);
double covariance_of_means(double sum_a, double sum_b, double sum_ab, int64_t count);
// Linear interpolation at fraction·(n−1) of sorted values (llama.cpp's `percentile`).
double percentile_sorted(const std::vector<float>& sorted, double fraction);

// The summary as llama.cpp prints it (same labels and units), and as JSON.
std::string format_kld_summary(const KldSummary& s);
nlohmann::json kld_summary_json(const KldSummary& s);

}  // namespace qt
