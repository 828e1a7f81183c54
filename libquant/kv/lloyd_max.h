// Lloyd-Max scalar quantizers (docs/spec/lloyd-max.md §Algorithm): the 2^b levels that minimize the
// mean squared error for a known density, found by alternating the nearest-neighbour cells
// (thresholds at midpoints) and the centroid condition until the centroids move less than 1e-12.
//
// The densities the KV methods need: the standard normal (RVQ stage 1), the unit-variance
// Laplacian (RVQ stage 2), one coordinate of a random unit vector in R^d (TurboQuant's f_d) —
// tables in docs/spec/lloyd-max.md — and PolarQuant's level-ℓ angle density (kv-methods.md). Cell
// integrals come from cumulative tables of ∫f and ∫x·f on a fine grid (trapezoid, 2^20 intervals,
// linear interpolation between grid points): accurate to ~1e-9, enough for the published 7-digit
// tables.
#pragma once
#include <string>
#include <vector>

namespace qt::kv {

struct Codebook {
  std::vector<double> centroids;   // ascending, 2^b of them
  std::vector<double> thresholds;  // the 2^b − 1 midpoints between neighbours
  double mse = 0;                  // E[(x − q(x))²] under the density
  int iterations = 0;
};

enum class Density { Gaussian, Laplacian, Sphere, PolarAngle };

// Lloyd-Max with `levels` centroids for the density. `param`: Sphere — the dimension d
// (support [−1, 1], f ∝ (1 − z²)^((d−3)/2)); PolarAngle — the level ℓ ≥ 2 (support [0, π/2],
// f ∝ sin^(2^(ℓ−1)−1)(2ψ)); unused for the others (unit variance).
Codebook lloyd_max(Density density, int levels, double param = 0);

// The index of the cell x falls in: #{i : x > thresholds[i]} (an exact tie goes to the lower
// cell, docs/spec/lloyd-max.md §Algorithm).
inline int codebook_index(const float* thresholds, int n_thresholds, float x) {
  int i = 0;
  for (int t = 0; t < n_thresholds; ++t) i += x > thresholds[t];
  return i;
}

}  // namespace qt::kv
