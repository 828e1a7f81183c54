// Threads: OpenMP under one knob. Every hot loop uses the count set here (--threads).
#pragma once
#include <omp.h>

namespace qt {
inline void set_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}
inline int num_threads() { return omp_get_max_threads(); }

// The thread count without --threads: one per physical core among the CPUs this process may run
// on (a core's second hardware thread adds no vector units to GEMM-bound work, only a share of
// its caches), at most the CPUs a cgroup quota grants (a container's --cpus), at least 1.
int default_threads();
// set_threads(default_threads()) unless OMP_NUM_THREADS chose a count; once, at start-up.
void apply_default_threads();
}  // namespace qt
