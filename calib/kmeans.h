// k-means for product-quantization codebooks (docs/spec/calibration.md §k-means for codebooks),
// deterministic per seed.
//
//   init     k-means++: the first centre a uniformly drawn point; each next one drawn with
//            probability ∝ D(x)², D the distance to the nearest centre chosen so far (the
//            standard, non-greedy variant). Draws: Rng(seed).uniform() (splitmix64,
//            libquant/kv/random.h): index ⌊u·N⌋ for the first, then the first point whose running
//            Σ D² (in double, point order) exceeds u·Σ D².
//   Lloyd    assign every point to its nearest centre — squared distance accumulated in float
//            over the dimensions in order, ties to the lowest index — and move each centre to the
//            mean of its points (summed in double in point order, rounded to float once); stop when
//            no assignment changes or after max_iter iterations.
//   empty    a centre left without points moves to the point farthest from its own centre (the
//            lowest index among equals; scikit-learn's rule, no randomness), one empty centre
//            after another, before the means are taken.
// tests/golden/make_kmeans_golden.py implements the same in numpy (the golden test_kv_vq checks).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace qt::calib {

struct KMeansResult {
  std::vector<float> centroids;  // k × dim
  std::vector<int32_t> assign;   // n
  double inertia = 0;            // Σ squared distance to the assigned centre (float distances, summed in double)
  int iterations = 0;            // Lloyd iterations run
};

// x: n × dim, row-major. k ≤ n. Deterministic: the same input and seed give the same bytes.
// `project`, when given, is called on the centres (k × dim) after the k-means++ init (counts all
// 1) and after every M-step (counts: the points each centre got) — a constrained codebook's
// projection (CommVQ's RoPE-commuting form); the assignments then use the projected centres.
using CentreProjection = std::function<void(float* centres, const int64_t* counts)>;
KMeansResult kmeans(const float* x, int64_t n, int dim, int k, uint64_t seed, int max_iter = 25,
                    const CentreProjection& project = nullptr);

}  // namespace qt::calib
