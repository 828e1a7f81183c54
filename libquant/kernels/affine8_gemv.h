// A few tokens (the decode step) against MLX affine 8-bit codes with bf16 scales and biases, each
// weight rounded as MLX's CPU backend computes it for a bf16 model: w = bf16(bf16(q·s) + b). The
// weights are never stored.
//
// Why a kernel of its own: the row-at-a-time dot (weight_only_linear.cpp) rounds each step with
// integer arithmetic, five operations per 16 weights and rounding, ~15 per 16 codes in all, and read
// each row on the hardware prefetcher alone: 18% of the memory rate (8B-shaped decode, 2 threads,
// 2-core Xeon). Here VCVTNE2PS2BF16 (AVX512-BF16: round to nearest even, as f32_to_bf16) rounds 32
// weights in one instruction, and the rounded pairs are split back into fp32 with one shift (even
// elements) and one mask (odd elements): ~8 operations per 16 codes. The split leaves the 32 weights
// of a chunk in a fixed order, which the token is permuted into once per call (affine8_prepare).
// Unlike the integer rounding, VCVTNE2PS2BF16 flushes denormal values (below 2^-126) to zero.
// The sums are fp32 in another order than a row decoded and dotted (within fp32 rounding of it;
// test_packed_linear.cpp bounds them against a double reference).
#pragma once
#include <cstdint>

#include "libquant/kernels/affine_weights_avx512.h"

namespace qt::kernels {

// The CPU level this needs (AVX-512 F/BW/DQ/VL, FMA and AVX512-BF16), k a multiple of the group
// size g, and g a multiple of 32.
bool affine8_gemv_supports(int64_t k, int64_t g);

// m tokens x [m, k] into out [m, k] in the kernel's order.
void affine8_prepare(const float* x, int64_t m, int64_t k, float* out);

// y[t·n + r] = Σ_j w_rj · x_tj (+ bias[r]) for every row of a codes matrix [n, k bytes] and m
// prepared tokens xp, OpenMP-parallel over rows; scale and bias per group of g.
void affine8_rows(const uint8_t* codes, const AffineGroupScales& scales, int64_t n, int64_t k, int64_t g,
                  const float* xp, int64_t m, const float* bias, float* y);

}  // namespace qt::kernels
