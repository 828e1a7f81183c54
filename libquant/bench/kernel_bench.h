// Cider's kernel latency table (docs/spec/int8-w8a8.md §Kernel latency shapes): y[M,N] =
// x[M,K]·Wᵀ for one random matrix per shape, through every Linear kind we have — dense f32 and
// bf16, and the packed schemes built from quantize_weights — each cell timed in the same run, so
// ratios to f32 are side by side.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "libquant/schemes/scheme.h"

namespace qt::bench {

struct KernelColumn {
  std::string label;   // "f32", "w8a8", "affine4-g64", ...
  std::string scheme;  // "" for dense
  int bits = 0, group = 0;
  bool bf16 = false;            // dense bf16
  bool fp_activations = false;  // integer schemes without activation quantization (decode path)
  DType dtype = DType::F32;     // scales and biases as stored (BF16: what convert writes from a bf16 model)
};
std::vector<KernelColumn> default_kernel_columns();
// The quantization parameters of a scheme column.
SchemeParams scheme_of(const KernelColumn& c);

struct KernelCell {
  double best_s = 0;  // seconds per forward; 0 when the column cannot run here
  std::string kind;   // Linear::kind() that ran
};

struct KernelRow {
  std::string shape;  // "smollm2 gate", or "seed" and N×K for Cider's shapes
  int64_t n = 0, k = 0, m = 0;
  std::vector<KernelCell> cells;  // one per column
};

// For every shape and every m: build each column's Linear once per shape, time forward.
std::vector<KernelRow> run_kernel_bench(const std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>>& shapes,
                                        const std::vector<int64_t>& ms, const std::vector<KernelColumn>& columns,
                                        double min_seconds);

}  // namespace qt::bench
