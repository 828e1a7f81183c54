// The memory-bound end of the kernel table: one token (M = 1) through a Linear whose weights come
// from DRAM, as in token-by-token decoding. A single matrix of Cider's shapes fits in a server's
// L3 and would be timed from cache, so the bench cycles through copies of it whose packed bytes
// add up to at least `min_bytes` (4× L3), each copy its own allocation, and reports the packed
// bytes read per second — the unit of the "70% of the measured memory bandwidth" target.
#pragma once
#include <cstdint>
#include <string>

#include "libquant/bench/kernel_bench.h"

namespace qt::bench {

struct GemvResult {
  std::string kind;  // Linear::kind() that ran ("" when the column cannot run here)
  int64_t n = 0, k = 0;
  int copies = 0;             // matrices cycled through
  double bytes_per_pass = 0;  // packed bytes of all copies (codes, scales, biases)
  double best_s = 0;          // seconds for one pass over all copies (best of the passes)
  double gb_per_s() const { return best_s > 0 ? bytes_per_pass / best_s * 1e-9 : 0.0; }
};

GemvResult run_gemv_bench(const KernelColumn& column, int64_t n, int64_t k, size_t min_bytes, double min_seconds);

}  // namespace qt::bench
