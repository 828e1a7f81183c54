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

// RoPE (rotate-half) of one pair (x0, x1) = (x[i], x[i + hd/2]) by the angle with cosine c and sine
// s: (x0·c − x1·s, x1·c + x0·s), each with one rounded product and one FMA, written out so that
// the q|k|v pass and the GEMM epilogue (gemm_q8_rope.cu) give the same bits.
__device__ __forceinline__ void rope_pair(float& x0, float& x1, float c, float s) {
  const float y0 = __fmaf_rn(x0, c, -__fmul_rn(x1, s)), y1 = __fmaf_rn(x1, c, __fmul_rn(x0, s));
  x0 = y0;
  x1 = y1;
}

}  // namespace qt::cuda
