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
  s.kld_max = k.back();
  s.kld_p999 = percentile_sorted(k, 0.999);
  s.kld_p99 = percentile_sorted(k, 0.990);
  s.kld_p95 = percentile_sorted(k, 0.950);
  s.kld_p90 = percentile_sorted(k, 0.900);
  s.kld_median = median_sorted(k);
  s.kld_p10 = percentile_sorted(k, 0.100);
  s.kld_p5 = percentile_sorted(k, 0.050);
  s.kld_p1 = percentile_sorted(k, 0.010);
  s.kld_p01 = percentile_sorted(k, 0.001);
  s.kld_min = k.front();

  const MeanErr dp = mean_and_uncertainty(sum_p_diff_, sum_p_diff2_, count_);
  s.dp = dp.mean;
  s.dp_err = dp.err;
  s.dp_max = d.back();
  s.dp_p999 = percentile_sorted(d, 0.999);
  s.dp_p99 = percentile_sorted(d, 0.990);
  s.dp_p95 = percentile_sorted(d, 0.950);
  s.dp_p90 = percentile_sorted(d, 0.900);
  s.dp_p75 = percentile_sorted(d, 0.750);
  s.dp_median = median_sorted(d);
  s.dp_p25 = percentile_sorted(d, 0.250);
  s.dp_p10 = percentile_sorted(d, 0.100);
  s.dp_p5 = percentile_sorted(d, 0.050);
  s.dp_p1 = percentile_sorted(d, 0.010);
  s.dp_p01 = percentile_sorted(d, 0.001);
  s.dp_min = d.front();

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
  fmt::format_to(out, "Maximum KLD: {:10.6f}\n", s.kld_max);
  fmt::format_to(out, "99.9%   KLD: {:10.6f}\n", s.kld_p999);
  fmt::format_to(out, "99.0%   KLD: {:10.6f}\n", s.kld_p99);
  fmt::format_to(out, "95.0%   KLD: {:10.6f}\n", s.kld_p95);
  fmt::format_to(out, "90.0%   KLD: {:10.6f}\n", s.kld_p90);
  fmt::format_to(out, "Median  KLD: {:10.6f}\n", s.kld_median);
  fmt::format_to(out, "10.0%   KLD: {:10.6f}\n", s.kld_p10);
  fmt::format_to(out, " 5.0%   KLD: {:10.6f}\n", s.kld_p5);
  fmt::format_to(out, " 1.0%   KLD: {:10.6f}\n", s.kld_p1);
  fmt::format_to(out, " 0.1%   KLD: {:10.6f}\n", s.kld_p01);
  fmt::format_to(out, "Minimum KLD: {:10.6f}\n", s.kld_min);
  fmt::format_to(out, "\n====== Token probability statistics ======\n");
  fmt::format_to(out, "Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100.0 * s.dp, 100.0 * s.dp_err);
  fmt::format_to(out, "Maximum Δp: {:6.3f}%\n", 100.0 * s.dp_max);
  fmt::format_to(out, "99.9%   Δp: {:6.3f}%\n", 100.0 * s.dp_p999);
  fmt::format_to(out, "99.0%   Δp: {:6.3f}%\n", 100.0 * s.dp_p99);
  fmt::format_to(out, "95.0%   Δp: {:6.3f}%\n", 100.0 * s.dp_p95);
  fmt::format_to(out, "90.0%   Δp: {:6.3f}%\n", 100.0 * s.dp_p90);
  fmt::format_to(out, "75.0%   Δp: {:6.3f}%\n", 100.0 * s.dp_p75);
  fmt::format_to(out, "Median  Δp: {:6.3f}%\n", 100.0 * s.dp_median);
  fmt::format_to(out, "25.0%   Δp: {:6.3f}%\n", 100.0 * s.dp_p25);
  fmt::format_to(out, "10.0%   Δp: {:6.3f}%\n", 100.0 * s.dp_p10);
  fmt::format_to(out, " 5.0%   Δp: {:6.3f}%\n", 100.0 * s.dp_p5);
  fmt::format_to(out, " 1.0%   Δp: {:6.3f}%\n", 100.0 * s.dp_p1);
  fmt::format_to(out, " 0.1%   Δp: {:6.3f}%\n", 100.0 * s.dp_p01);
  fmt::format_to(out, "Minimum Δp: {:6.3f}%\n", 100.0 * s.dp_min);
  fmt::format_to(out, "RMS Δp    : {:6.3f} ± {:5.3f} %\n", 100.0 * s.rms_dp, 100.0 * s.rms_dp_err);
  fmt::format_to(out, "Same top p: {:6.3f} ± {:5.3f} %\n", 100.0 * s.same_top, 100.0 * s.same_top_err);
  return o;
}

nlohmann::json kld_summary_json(const KldSummary& s) {
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
      {"kld_percentiles",
       {{"max", s.kld_max},
        {"99.9", s.kld_p999},
        {"99", s.kld_p99},
        {"95", s.kld_p95},
        {"90", s.kld_p90},
        {"median", s.kld_median},
        {"10", s.kld_p10},
        {"5", s.kld_p5},
        {"1", s.kld_p1},
        {"0.1", s.kld_p01},
        {"min", s.kld_min}}},
      {"dp_mean", s.dp},
      {"dp_err", s.dp_err},
      {"dp_percentiles",
       {{"max", s.dp_max},
        {"99.9", s.dp_p999},
        {"99", s.dp_p99},
        {"95", s.dp_p95},
        {"90", s.dp_p90},
        {"75", s.dp_p75},
        {"median", s.dp_median},
        {"25", s.dp_p25},
        {"10", s.dp_p10},
        {"5", s.dp_p5},
        {"1", s.dp_p1},
        {"0.1", s.dp_p01},
        {"min", s.dp_min}}},
      {"rms_dp", s.rms_dp},
      {"rms_dp_err", s.rms_dp_err},
      {"same_top", s.same_top},
      {"same_top_err", s.same_top_err},
  };
}

}  // namespace qt
