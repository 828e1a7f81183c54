// KL-divergence statistics, following llama.cpp tools/perplexity/perplexity.cpp (kl_divergence,
// log_softmax with base log-probs) formula for formula; see kld.h for the one difference (exact
// baseline log-probs over the full vocabulary).
#include "libquant/eval/kld.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <fmt/format.h>

#include "libquant/math/ops.h"

namespace qt {

KldToken kld_token(const float* base, const float* test, int n_vocab, int target) {
  const ops::RowStats sb = ops::row_stats(base, n_vocab);
  const ops::RowStats st = ops::row_stats(test, n_vocab);
  KldToken t;
  t.nll = st.lse - double(test[target]);
  t.nll_base = sb.lse - double(base[target]);
  t.kld = ops::kl_row(base, sb.lse, test, st.lse, n_vocab);
  t.same_top = sb.argmax == st.argmax;
  return t;
}

void KldAccumulator::add(const KldToken& t) {
  sum_nll_ += t.nll;
  sum_nll2_ += t.nll * t.nll;
  sum_nll_base_ += t.nll_base;
  sum_nll_base2_ += t.nll_base * t.nll_base;
  sum_nll_nll_base_ += t.nll * t.nll_base;
  sum_kld_ += t.kld;
  sum_kld2_ += t.kld * t.kld;
  const double p_diff = std::exp(-t.nll) - std::exp(-t.nll_base);
  sum_p_diff_ += p_diff;
  const double p_diff2 = p_diff * p_diff;
  sum_p_diff2_ += p_diff2;
  sum_p_diff4_ += p_diff2 * p_diff2;
  n_same_top_ += t.same_top;
  ++count_;
  kld_values_.push_back(float(t.kld));
  p_diff_values_.push_back(float(p_diff));
}

MeanErr mean_and_uncertainty(double sum, double sum2, int64_t count) {
  if (count < 1) return {};
  const double f = sum / double(count);
  double df = sum2 / double(count) - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / double(count - 1)) : 0.0;
  return {f, df};
}

double covariance_of_means(double sum_a, double sum_b, double sum_ab, int64_t count) {
  if (count < 10) return 0.0;
  const double n = double(count);
  return (sum_ab / n - (sum_a / n) * (sum_b / n)) / (n - 1);
}

double percentile_sorted(const std::vector<float>& v, double fraction) {
  if (v.empty()) return 0;
  if (fraction <= 0) return v.front();
  if (fraction >= 1) return v.back();
  double p = fraction * double(v.size() - 1);
  const size_t ip = size_t(p);
  p -= double(ip);
  return (1 - p) * v[ip] + p * v[std::min(ip + 1, v.size() - 1)];
}

namespace {
double median_sorted(const std::vector<float>& v) {
  if (v.empty()) return 0;
  const size_t n = v.size();
  return n % 2 == 0 ? 0.5 * (double(v[n / 2]) + v[n / 2 - 1]) : double(v[n / 2]);
}

// The percentiles llama.cpp reports (perplexity.cpp), in its order: the label it prints, the key
// in our JSON, the fraction (the median is computed apart, as llama.cpp does), and the fields of
// the KLD (none: not reported for KLD) and of Δp.
struct Percentile {
  const char* label;
  const char* key;
  double fraction;
  bool median;
  double KldSummary::*kld;
  double KldSummary::*dp;
};
const Percentile kPercentiles[] = {
    {"Maximum", "max", 1.0, false, &KldSummary::kld_max, &KldSummary::dp_max},
    {"99.9%  ", "99.9", 0.999, false, &KldSummary::kld_p999, &KldSummary::dp_p999},
    {"99.0%  ", "99", 0.990, false, &KldSummary::kld_p99, &KldSummary::dp_p99},
    {"95.0%  ", "95", 0.950, false, &KldSummary::kld_p95, &KldSummary::dp_p95},
    {"90.0%  ", "90", 0.900, false, &KldSummary::kld_p90, &KldSummary::dp_p90},
    {"75.0%  ", "75", 0.750, false, nullptr, &KldSummary::dp_p75},
    {"Median ", "median", 0.5, true, &KldSummary::kld_median, &KldSummary::dp_median},
    {"25.0%  ", "25", 0.250, false, nullptr, &KldSummary::dp_p25},
    {"10.0%  ", "10", 0.100, false, &KldSummary::kld_p10, &KldSummary::dp_p10},
    {" 5.0%  ", "5", 0.050, false, &KldSummary::kld_p5, &KldSummary::dp_p5},
    {" 1.0%  ", "1", 0.010, false, &KldSummary::kld_p1, &KldSummary::dp_p1},
    {" 0.1%  ", "0.1", 0.001, false, &KldSummary::kld_p01, &KldSummary::dp_p01},
    {"Minimum", "min", 0.0, false, &KldSummary::kld_min, &KldSummary::dp_min},
};

double percentile_of(const Percentile& q, const std::vector<float>& sorted) {
  return q.median ? median_sorted(sorted) : percentile_sorted(sorted, q.fraction);
}
}  // namespace

KldSummary KldAccumulator::summary() const {
  KldSummary s;
  s.count = count_;
  if (count_ == 0) return s;
  const MeanErr lp = mean_and_uncertainty(sum_nll_, sum_nll2_, count_);
  s.ppl = std::exp(lp.mean);
  s.ppl_err = s.ppl * lp.err;
  const MeanErr lb = mean_and_uncertainty(sum_nll_base_, sum_nll_base2_, count_);
  s.ppl_base = std::exp(lb.mean);
  s.ppl_base_err = s.ppl_base * lb.err;
  const double cov = covariance_of_means(sum_nll_, sum_nll_base_, sum_nll_nll_base_, count_);
  s.cor = lp.err > 0 && lb.err > 0 ? cov / (lp.err * lb.err) : 0.0;
  s.ln_ratio = lp.mean - lb.mean;
  s.ln_ratio_err = std::sqrt(std::max(0.0, lp.err * lp.err + lb.err * lb.err - 2.0 * cov));
  s.ratio = std::exp(s.ln_ratio);
  s.ratio_err = s.ratio * s.ln_ratio_err;
  const double ppl_cov = s.ppl * s.ppl_base * cov;
  s.diff = s.ppl - s.ppl_base;
  s.diff_err = std::sqrt(std::max(0.0, s.ppl_err * s.ppl_err + s.ppl_base_err * s.ppl_base_err - 2.0 * ppl_cov));

  const MeanErr kl = mean_and_uncertainty(sum_kld_, sum_kld2_, count_);
  s.kld = kl.mean;
  s.kld_err = kl.err;
  std::vector<float> k = kld_values_, d = p_diff_values_;
  std::sort(k.begin(), k.end());
  std::sort(d.begin(), d.end());
  for (const Percentile& q : kPercentiles) {
    if (q.kld) s.*q.kld = percentile_of(q, k);
    s.*q.dp = percentile_of(q, d);
  }

  const MeanErr dp = mean_and_uncertainty(sum_p_diff_, sum_p_diff2_, count_);
  s.dp = dp.mean;
  s.dp_err = dp.err;

  const MeanErr mse = mean_and_uncertainty(sum_p_diff2_, sum_p_diff4_, count_);
  s.rms_dp = std::sqrt(mse.mean);
  s.rms_dp_err = s.rms_dp > 0 ? 0.5 / s.rms_dp * mse.err : 0.0;
  s.same_top = double(n_same_top_) / double(count_);
  s.same_top_err = count_ > 1 ? std::sqrt(s.same_top * (1.0 - s.same_top) / double(count_ - 1)) : 0.0;
  return s;
}

std::string format_kld_summary(const KldSummary& s) {
  std::string o;
  auto out = std::back_inserter(o);
  fmt::format_to(out, "====== Perplexity statistics ======\n");
  fmt::format_to(out, "Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", s.ppl, s.ppl_err);
  fmt::format_to(out, "Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", s.ppl_base, s.ppl_base_err);
  fmt::format_to(out, "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2f}%\n", 100.0 * s.cor);
  fmt::format_to(out, "Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", s.ln_ratio, s.ln_ratio_err);
  fmt::format_to(out, "Mean PPL(Q)/PPL(base)         : {:10.6f} ± {:10.6f}\n", s.ratio, s.ratio_err);
  fmt::format_to(out, "Mean PPL(Q)-PPL(base)         : {:10.6f} ± {:10.6f}\n", s.diff, s.diff_err);
  fmt::format_to(out, "\n====== KL divergence statistics ======\n");
  fmt::format_to(out, "Mean    KLD: {:10.6f} ± {:10.6f}\n", s.kld, s.kld_err);
  for (const Percentile& q : kPercentiles)
    if (q.kld) fmt::format_to(out, "{} KLD: {:10.6f}\n", q.label, s.*q.kld);
  fmt::format_to(out, "\n====== Token probability statistics ======\n");
  fmt::format_to(out, "Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100.0 * s.dp, 100.0 * s.dp_err);
  for (const Percentile& q : kPercentiles) fmt::format_to(out, "{} Δp: {:6.3f}%\n", q.label, 100.0 * s.*q.dp);
  fmt::format_to(out, "RMS Δp    : {:6.3f} ± {:5.3f} %\n", 100.0 * s.rms_dp, 100.0 * s.rms_dp_err);
  fmt::format_to(out, "Same top p: {:6.3f} ± {:5.3f} %\n", 100.0 * s.same_top, 100.0 * s.same_top_err);
  return o;
}

nlohmann::json kld_summary_json(const KldSummary& s) {
  nlohmann::json kld_pct = nlohmann::json::object(), dp_pct = nlohmann::json::object();
  for (const Percentile& q : kPercentiles) {
    if (q.kld) kld_pct[q.key] = s.*q.kld;
    dp_pct[q.key] = s.*q.dp;
  }
  return {
      {"count", s.count},
      {"ppl", s.ppl},
      {"ppl_err", s.ppl_err},
      {"ppl_base", s.ppl_base},
      {"ppl_base_err", s.ppl_base_err},
      {"cor_ln_ppl", s.cor},
      {"ln_ppl_ratio", s.ln_ratio},
      {"ln_ppl_ratio_err", s.ln_ratio_err},
      {"ppl_ratio", s.ratio},
      {"ppl_ratio_err", s.ratio_err},
      {"ppl_diff", s.diff},
      {"ppl_diff_err", s.diff_err},
      {"kld_mean", s.kld},
      {"kld_err", s.kld_err},
      {"kld_percentiles", kld_pct},
      {"dp_mean", s.dp},
      {"dp_err", s.dp_err},
      {"dp_percentiles", dp_pct},
      {"rms_dp", s.rms_dp},
      {"rms_dp_err", s.rms_dp_err},
      {"same_top", s.same_top},
      {"same_top_err", s.same_top_err},
  };
}

}  // namespace qt
