#include "libquant/kv/random.h"

#include <cmath>
#include <cstring>

#include "formats/error.h"
#include "libquant/kv/attend_kernels.h"

namespace qt::kv {

uint64_t Rng::next() {  // splitmix64
  uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

double Rng::normal() {
  if (have_) {
    have_ = false;
    return spare_;
  }
  double u = 0;
  while (u <= 0) u = uniform();
  const double v = uniform();
  const double r = std::sqrt(-2.0 * std::log(u));
  spare_ = r * std::sin(2 * M_PI * v);
  have_ = true;
  return r * std::cos(2 * M_PI * v);
}

namespace {

// Orthonormalize the n rows (length d) of a in place: modified Gram–Schmidt, twice.
void orthonormalize_rows(std::vector<double>& a, int n, int d) {
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < n; ++i) {
      double* ri = a.data() + size_t(i) * d;
      for (int j = 0; j < i; ++j) {
        const double* rj = a.data() + size_t(j) * d;
        double dot = 0;
        for (int k = 0; k < d; ++k) dot += ri[k] * rj[k];
        for (int k = 0; k < d; ++k) ri[k] -= dot * rj[k];
      }
      double nn = 0;
      for (int k = 0; k < d; ++k) nn += ri[k] * ri[k];
      nn = 1.0 / std::sqrt(nn);
      for (int k = 0; k < d; ++k) ri[k] *= nn;
    }
}

}  // namespace

std::vector<float> random_orthogonal(int d, uint64_t seed) {
  Rng r(seed);
  std::vector<double> a(size_t(d) * d);
  for (double& x : a) x = r.normal();
  orthonormalize_rows(a, d, d);
  return std::vector<float>(a.begin(), a.end());
}

std::vector<float> random_signs(int d, uint64_t seed) {
  Rng r(seed);
  std::vector<float> s(d);
  for (float& x : s) x = (r.next() >> 63) ? -1.0f : 1.0f;
  return s;
}

std::vector<float> gaussian_matrix(int m, int d, uint64_t seed, bool orthogonalize) {
  Rng r(seed);
  std::vector<double> a(size_t(m) * d);
  for (double& x : a) x = r.normal();
  if (orthogonalize)
    for (int b = 0; b < m; b += d) {
      const int n = std::min(d, m - b);
      std::vector<double> blk(a.begin() + size_t(b) * d, a.begin() + size_t(b + n) * d);
      orthonormalize_rows(blk, n, d);
      for (size_t i = 0; i < blk.size(); ++i) a[size_t(b) * d + i] = blk[i] * std::sqrt(double(d));
    }
  return std::vector<float>(a.begin(), a.end());
}

void fwht(float* x, int d) {
  for (int h = 1; h < d; h *= 2)
    for (int i = 0; i < d; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}

Rotation::Rotation(const std::string& kind, int d, uint64_t seed, const std::vector<float>* given)
    : kind_(kind), d_(d) {
  if (kind == "wht") {
    if (d <= 0 || (d & (d - 1))) user_error("rot=wht: head dimension {} is not a power of two (use rot=dense)", d);
    m_ = given ? *given : random_signs(d, sub_seed(seed, SeedUse::Signs));
    if (int(m_.size()) != d) user_error("rotation: {} signs given for dimension {}", m_.size(), d);
  } else if (kind == "dense") {
    m_ = given ? *given : random_orthogonal(d, sub_seed(seed, SeedUse::Rotation));
    if (m_.size() != size_t(d) * d) user_error("rotation: {} values given for a {}x{} matrix", m_.size(), d, d);
  } else {
    user_error("rot={}: unknown rotation (wht or dense)", kind);
  }
}

void Rotation::apply(const float* x, float* y) const {
  if (kind_ == "wht") {
    const float inv = 1.0f / std::sqrt(float(d_));
    for (int i = 0; i < d_; ++i) y[i] = x[i] * m_[i];
    fwht(y, d_);
    for (int i = 0; i < d_; ++i) y[i] *= inv;
    return;
  }
  float tmp[1024];
  std::vector<float> big;
  float* t = tmp;
  if (d_ > 1024) t = (big = std::vector<float>(d_)).data();
  attend_kernels().dot_rows(x, m_.data(), d_, d_, d_, t);
  std::memcpy(y, t, sizeof(float) * d_);
}

void Rotation::inverse(const float* y, float* x) const {
  if (kind_ == "wht") {
    const float inv = 1.0f / std::sqrt(float(d_));
    if (x != y) std::memcpy(x, y, sizeof(float) * d_);
    fwht(x, d_);
    for (int i = 0; i < d_; ++i) x[i] *= inv * m_[i];
    return;
  }
  float tmp[1024];
  std::vector<float> big;
  float* t = tmp;
  if (d_ > 1024) t = (big = std::vector<float>(d_)).data();
  for (int k = 0; k < d_; ++k) t[k] = 0;
  attend_kernels().mix_rows(y, m_.data(), d_, d_, d_, t);
  std::memcpy(x, t, sizeof(float) * d_);
}

}  // namespace qt::kv
