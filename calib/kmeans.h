// k-means for product-quantization codebooks (METHODS.md C.5), deterministic per seed.
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
#include <vector>

namespace qt::calib {

struct KMeansResult {
  std::vector<float> centroids;  // k × dim
  std::vector<int32_t> assign;   // n
  double inertia = 0;            // Σ squared distance to the assigned centre (float distances, summed in double)
  int iterations = 0;            // Lloyd iterations run
};

// x: n × dim, row-major. k ≤ n. Deterministic: the same input and seed give the same bytes.
KMeansResult kmeans(const float* x, int64_t n, int dim, int k, uint64_t seed, int max_iter = 25);

}  // namespace qt::calib
