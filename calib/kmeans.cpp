#include "calib/kmeans.h"

#include <limits>

#include "formats/error.h"
#include "libquant/kv/random.h"

namespace qt::calib {
namespace {

inline float sqdist(const float* a, const float* b, int dim) {
  float s = 0.0f;
  for (int i = 0; i < dim; ++i) {
    const float t = a[i] - b[i];
    s += t * t;
  }
  return s;
}

// The nearest centre of one point (ties to the lowest index) and its squared distance, over the
// centres stored dimension-major (ct[i·k + j]) so the loop runs across centres in SIMD lanes; the
// arithmetic per (point, centre) is sqdist's, in the same order, so both give the same floats.
__attribute__((target_clones("avx2", "default"))) int32_t nearest(const float* xi, const float* ct, int k, int dim,
                                                                  float* acc, float* best_d) {
  for (int j = 0; j < k; ++j) acc[j] = 0.0f;
  for (int i = 0; i < dim; ++i) {
    const float x = xi[i];
    const float* row = ct + size_t(i) * k;
    for (int j = 0; j < k; ++j) {
      const float t = x - row[j];
      acc[j] += t * t;
    }
  }
  int32_t b = 0;
  for (int j = 1; j < k; ++j)
    if (acc[j] < acc[b]) b = j;
  *best_d = acc[b];
  return b;
}

// Nearest centre of every point and its distance.
void assign_all(const float* x, int64_t n, int dim, const std::vector<float>& c, int k, std::vector<int32_t>& a,
                std::vector<float>& dist) {
  std::vector<float> ct(c.size());
  for (int j = 0; j < k; ++j)
    for (int i = 0; i < dim; ++i) ct[size_t(i) * k + j] = c[size_t(j) * dim + i];
#pragma omp parallel if (n * k * dim > (1 << 20))
  {
    std::vector<float> acc(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      a[size_t(i)] = nearest(x + i * dim, ct.data(), k, dim, acc.data(), &dist[size_t(i)]);
  }
}

}  // namespace

KMeansResult kmeans(const float* x, int64_t n, int dim, int k, uint64_t seed, int max_iter,
                    const CentreProjection& project) {
  if (k < 1 || n < k || dim < 1) user_error("k-means: {} centroids from {} points of dimension {}", k, n, dim);
  kv::Rng rng(seed);
  KMeansResult r;
  r.centroids.assign(size_t(k) * dim, 0.0f);
  auto set_centre = [&](int j, int64_t i) {
    std::copy(x + i * dim, x + (i + 1) * dim, r.centroids.begin() + size_t(j) * dim);
  };

  // k-means++
  std::vector<float> dmin(static_cast<size_t>(n));
  int64_t first = std::min<int64_t>(n - 1, int64_t(rng.uniform() * double(n)));
  set_centre(0, first);
  for (int64_t i = 0; i < n; ++i) dmin[size_t(i)] = sqdist(x + i * dim, r.centroids.data(), dim);
  for (int j = 1; j < k; ++j) {
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += dmin[size_t(i)];
    int64_t pick = n - 1;
    if (total > 0) {
      const double u = rng.uniform() * total;
      double run = 0;
      for (int64_t i = 0; i < n; ++i) {
        run += dmin[size_t(i)];
        if (run > u) {
          pick = i;
          break;
        }
      }
    } else {
      rng.uniform();  // every point is already a centre: the draw is still consumed
      pick = j;       // (duplicates; Lloyd's empty-cluster rule handles them)
    }
    set_centre(j, pick);
    const float* c = r.centroids.data() + size_t(j) * dim;
#pragma omp parallel for schedule(static) if (n * dim > (1 << 18))
    for (int64_t i = 0; i < n; ++i) dmin[size_t(i)] = std::min(dmin[size_t(i)], sqdist(x + i * dim, c, dim));
  }

  if (project) {
    const std::vector<int64_t> ones(static_cast<size_t>(k), 1);
    project(r.centroids.data(), ones.data());
  }

  // Lloyd
  r.assign.assign(size_t(n), -1);
  std::vector<int32_t> a(static_cast<size_t>(n));
  std::vector<float> dist(static_cast<size_t>(n));
  std::vector<double> sum(static_cast<size_t>(k) * dim);
  std::vector<int64_t> cnt(static_cast<size_t>(k));
  for (int it = 0; it < max_iter; ++it) {
    assign_all(x, n, dim, r.centroids, k, a, dist);
    const bool changed = a != r.assign;
    r.assign = a;
    if (!changed) break;
    r.iterations = it + 1;
    std::fill(cnt.begin(), cnt.end(), 0);
    for (int64_t i = 0; i < n; ++i) ++cnt[size_t(a[size_t(i)])];
    for (int j = 0; j < k; ++j) {
      if (cnt[size_t(j)] > 0) continue;
      int64_t far = 0;  // the point farthest from its centre takes the empty one
      for (int64_t i = 1; i < n; ++i)
        if (dist[size_t(i)] > dist[size_t(far)]) far = i;
      --cnt[size_t(r.assign[size_t(far)])];
      r.assign[size_t(far)] = j;
      ++cnt[size_t(j)];
      dist[size_t(far)] = 0.0f;
    }
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      double* s = sum.data() + size_t(r.assign[size_t(i)]) * dim;
      for (int t = 0; t < dim; ++t) s[t] += x[i * dim + t];
    }
    for (int j = 0; j < k; ++j)
      if (cnt[size_t(j)] > 0)
        for (int t = 0; t < dim; ++t)
          r.centroids[size_t(j) * dim + t] = float(sum[size_t(j) * dim + t] / double(cnt[size_t(j)]));
    if (project) project(r.centroids.data(), cnt.data());
  }
  // the final assignment and inertia against the final centres
  assign_all(x, n, dim, r.centroids, k, r.assign, dist);
  r.inertia = 0;
  for (int64_t i = 0; i < n; ++i) r.inertia += dist[size_t(i)];
  return r;
}

}  // namespace qt::calib
