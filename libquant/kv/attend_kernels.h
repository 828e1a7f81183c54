// The vector loops of the quantized-cache attention (quant_cache.cpp), compiled once per kernel
// level (attend_kernels.cpp includes attend_kernels_impl.inc three times, as ops.cpp does).
#pragma once
#include <cstdint>
#include <vector>

namespace qt::kv {

constexpr int kTile = 32;  // tokens decoded at once

struct AttendKernels {
  // s[0..32) = Σ_d q[d] · tt[d·32 + jj]   (tt: a decoded key tile, transposed, zero padded)
  void (*score_tile)(const float* q, const float* tt, int dt, float* s);
  // The same for two queries (bit-identical to two score_tile calls).
  void (*score_tile2)(const float* q0, const float* q1, const float* tt, int dt, float* s0, float* s1);
  // s[j] = Σ_d q[d] · x[j·ld + d] for j < n   (full-precision keys)
  void (*dot_rows)(const float* q, const float* x, int64_t ld, int n, int d, float* s);
  // y[0..d) += Σ_j p[j] · x[j·ld + ·] for j < n   (values, decoded tiles or full precision)
  void (*mix_rows)(const float* p, const float* x, int64_t ld, int n, int d, float* y);
  // out[k] = bit k of `bits` (LSB first) set ? −w : w, for k < m   (1-bit sketches, QJL)
  void (*expand_signs)(const uint8_t* bits, int m, float w, float* out);
  // y[r·ldy + ·] = A x_r for n rows x_r = x + r·ldx, A (m × d) stored transposed (d × m)
  void (*project_rows)(const float* x, int64_t ldx, int n, const float* At, int d, int m, float* y, int64_t ldy);
};

// y[0..m) = Σ_i x[i] · At[i·m + ·] for i < d: y = A x with A (m × d) stored transposed (d × m),
// as broadcast-FMA rows (no horizontal sums per output, as one dot per row of A would need).
void project_t(const float* x, const float* At, int d, int m, float* y);
// The transpose of a rows × cols row-major matrix.
std::vector<float> transposed(const std::vector<float>& a, int rows, int cols);

// The loops for the current kernel level (libquant/cpu_features.h).
const AttendKernels& attend_kernels();

}  // namespace qt::kv
