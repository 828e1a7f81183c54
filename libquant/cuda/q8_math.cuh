// The per-token 8-bit path's arithmetic on one value, shared by the elementwise passes
// (int8_ops.cu) and the GEMM epilogues (gemm_q8_fused.cu), so both give the same bits.
#pragma once
#include <cuda_runtime.h>

namespace qt::cuda {

// sx · (sw · acc), each product rounded (no contraction into an FMA with a following add): the
// CPU's order (schemes/int8.cpp, int_linear.cpp).
__device__ __forceinline__ float deq(float sx, float sw, float acc) { return __fmul_rn(sx, __fmul_rn(sw, acc)); }

// silu(g)·u = g / (1 + exp(−g)) · u, skipping the IEEE division's slow path where 1 + exp(−g) is
// infinite (g/∞ = ±0: the same code 0).
__device__ __forceinline__ float silu_mul(float g, float u) {
  const float d = 1.0f + expf(-g);
  if (d == INFINITY) return copysignf(0.0f, g) * u;
  return g / d * u;
}

}  // namespace qt::cuda
