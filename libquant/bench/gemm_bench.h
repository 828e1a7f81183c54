// GEMM benchmark over a model's Linear shapes: y[M,N] = x[M,K]·Wᵀ through make_dense_linear,
// timed per shape, and the FLOP-weighted figure over the whole model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "libquant/linear/linear.h"

namespace qt::bench {

struct GemmShape {
  std::string name;  // "q", "gate", "output", ...
  int64_t n, k;      // out_features, in_features
  int count;         // how many such matrices the model has (weights the total)
};

// SmolLM2-135M: 30 layers of q, k, v, o, gate, up, down, plus the tied lm_head.
std::vector<GemmShape> smollm2_shapes();

struct GemmResult {
  GemmShape shape;
  int64_t m = 0;
  double best_s = 0, median_s = 0;  // seconds per forward
  double gflops() const;            // at the best time
  double flops() const { return 2.0 * double(m) * double(shape.n) * double(shape.k); }
};

// Times each shape (at least `min_reps` runs and `min_seconds` per shape); the weights and
// activations are random. Kernels are those of the current kernel level.
std::vector<GemmResult> run_gemm_bench(const std::vector<GemmShape>& shapes, int64_t m, Compute compute,
                                       double min_seconds = 0.3, int min_reps = 3);

// Σ count·flops / Σ count·best time over the results, in GFLOP/s.
double weighted_gflops(const std::vector<GemmResult>& results);

}  // namespace qt::bench
