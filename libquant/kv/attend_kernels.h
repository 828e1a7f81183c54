// The vector loops of the quantized-cache attention (quant_cache.cpp), compiled once per kernel
// level (attend_kernels.cpp includes attend_kernels_impl.inc three times, as ops.cpp does).
#pragma once
#include <cstdint>

namespace qt::kv {

constexpr int kTile = 32;  // tokens decoded at once

struct AttendKernels {
  // s[0..32) = Σ_d q[d] · tt[d·32 + jj]   (tt: a decoded key tile, transposed, zero padded)
  void (*score_tile)(const float* q, const float* tt, int dt, float* s);
  // s[j] = Σ_d q[d] · x[j·ld + d] for j < n   (full-precision keys)
  void (*dot_rows)(const float* q, const float* x, int64_t ld, int n, int d, float* s);
  // y[0..d) += Σ_j p[j] · x[j·ld + ·] for j < n   (values, decoded tiles or full precision)
  void (*mix_rows)(const float* p, const float* x, int64_t ld, int n, int d, float* y);
};

// The loops for the current kernel level (libquant/cpu_features.h).
const AttendKernels& attend_kernels();

}  // namespace qt::kv
