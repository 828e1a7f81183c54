// Threads: OpenMP under one knob. Every hot loop uses the count set here (--threads).
#pragma once
#include <omp.h>

namespace qt {
inline void set_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}
inline int num_threads() { return omp_get_max_threads(); }
}  // namespace qt
