// Llama-3 RoPE scaling both ways for GGUF, which keeps it only as the rope_freqs.weight tensor of
// per-frequency divisors: the divisors of a scaling (what convert_hf_to_gguf.py writes), and the
// scaling that gives a file's divisors (what an HF config needs).
// Facts: docs/spec/gguf.md §rope_freqs.
#include <cmath>
#include <string>
#include <vector>

#include "formats/error.h"
#include "formats/model_config.h"

namespace qt {

// llama3 scaling as ggml sees it: per-frequency divisors (docs/spec/gguf.md §rope_freqs),
// computed in double as convert_hf_to_gguf.py does, for comparison with a file's rope_freqs.weight.
std::vector<double> llama3_rope_factors(const RopeScaling& r, double theta, int dim) {
  std::vector<double> out;
  const double lo_wavelen = r.original_max_position_embeddings / double(r.low_freq_factor);
  const double hi_wavelen = r.original_max_position_embeddings / double(r.high_freq_factor);
  for (int i = 0; i < dim; i += 2) {
    double freq = 1.0 / std::pow(theta, double(i) / dim);
    double wavelen = 2 * M_PI / freq;
    if (wavelen < hi_wavelen) {
      out.push_back(1.0);
    } else if (wavelen > lo_wavelen) {
      out.push_back(r.factor);
    } else {
      double s =
          (r.original_max_position_embeddings / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      out.push_back(1.0 / ((1 - s) / r.factor + s));
    }
  }
  return out;
}

namespace {
// Scaling parameters are human-chosen round numbers; the file only holds them through float32
// ratios, so snap a fitted value to the nearest one with at most 3 decimals when that is within
// float rounding.
double snap(double x) {
  for (int d = 0; d <= 3; ++d) {
    double p = std::pow(10.0, d), r = std::round(x * p) / p;
    if (std::fabs(r - x) <= 2e-6 * std::fabs(x)) return r;
  }
  return x;
}

bool factors_match(const std::vector<double>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::fabs(a[i] - b[i]) > 1e-4 * std::fabs(a[i])) return false;
  return true;
}

// GGUF keeps Llama-3 scaling only as the rope_freqs.weight tensor; HF needs the four parameters.
// Meta's releases all use low 1, high 4, original context 8192; try that first, otherwise fit
// the smooth band (s linear in 1/wavelen) with low_freq_factor = 1; with fewer than two values in
// the band (a small head_dim) keep low 1 / high 4 and take the original context from the band's
// value, or from the gap between the unscaled and the fully scaled wavelengths. Any parameters
// that give the file's divisors give the same RoPE, so the first that matches is taken. Refuse
// what does not fit.
}  // namespace

RopeScaling llama3_scaling_from_rope_freqs(const std::vector<float>& ff, double theta, int dim,
                                           const std::string& path) {
  RopeScaling r;
  if ((int)ff.size() != dim / 2)
    user_error("{}: rope_freqs.weight has {} values, expected head_dim/2 = {}", path, ff.size(), dim / 2);
  float factor = 1.0f;
  bool all_one = true;
  for (float f : ff) {
    if (!(f > 0) || !std::isfinite(f)) user_error("{}: rope_freqs.weight holds {}", path, f);
    factor = std::max(factor, f);
    if (f != 1.0f) all_one = false;
  }
  if (all_one) return r;
  r.type = "llama3";
  r.factor = float(snap(factor));
  if (factors_match(llama3_rope_factors(r, theta, dim), ff)) return r;
  // Fit s_i = a / wavelen_i - b over the smooth band (1 < f < factor).
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (int i = 0; i < dim / 2; ++i) {
    double f = ff[i];
    if (f <= 1.0 + 1e-6 || f >= factor * (1 - 1e-6)) continue;
    double x = std::pow(theta, -2.0 * i / dim) / (2 * M_PI);
    double y = (1.0 / f - 1.0 / factor) / (1.0 - 1.0 / factor);
    sx += x, sy += y, sxx += x * x, sxy += x * y, ++n;
  }
  if (n >= 2) {
    double a = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    double b = (a * sx - sy) / n;
    if (a > 0 && b > 0) {
      r.low_freq_factor = 1.0f;
      r.high_freq_factor = float(snap(1.0 + 1.0 / b));
      r.original_max_position_embeddings = int(std::lround(a / b));
      if (factors_match(llama3_rope_factors(r, theta, dim), ff)) return r;
    }
  }
  // low 1, high 4: s = (orig / wavelen − 1) / 3, so one band value gives orig = wavelen · (3s + 1);
  // without one, orig lies between 4 × the longest unscaled wavelength and the shortest scaled one.
  r.low_freq_factor = 1.0f, r.high_freq_factor = 4.0f;
  std::vector<double> origs;
  double unscaled = 0, scaled = 0;
  for (int i = 0; i < dim / 2; ++i) {
    const double f = ff[i], wavelen = 2 * M_PI * std::pow(theta, 2.0 * i / dim);
    if (f <= 1.0 + 1e-6)
      unscaled = std::max(unscaled, wavelen);
    else if (f >= factor * (1 - 1e-6))
      scaled = scaled > 0 ? std::min(scaled, wavelen) : wavelen;
    else
      origs.push_back(wavelen * (3 * (1.0 / f - 1.0 / factor) / (1.0 - 1.0 / factor) + 1));
  }
  if (origs.empty() && scaled > 4 * unscaled)
    for (double o = 1; o < scaled; o *= 2)  // the smallest power of two in the gap
      if (o > 4 * unscaled) {
        origs.push_back(o);
        break;
      }
  for (double o : origs) {
    r.original_max_position_embeddings = int(std::lround(o));
    if (factors_match(llama3_rope_factors(r, theta, dim), ff)) return r;
  }
  user_error("{}: rope_freqs.weight does not describe a llama3 rope scaling", path);
}

}  // namespace qt
