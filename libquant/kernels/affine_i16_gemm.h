// Many tokens through MLX affine weights (4- or 8-bit codes, fp32 scales and biases): the prefill
// counterpart of affine_gemv.h, in the same integer form. Each token is rounded per group g to
// int16 (x ≈ d_g·x̃, d_g = max_g|x| / 32767: every value within 2^-16 of its group's largest, ~100×
// below bf16's rounding), the codes of a group of 64 output rows are decoded once per task into
// int16 pairs (no float weight, no copy of the matrix beyond that L2 panel), and code × token
// pairs are summed into exact int32 per group — VPDPWSSD on AVX-512 VNNI (32 multiply-adds per
// instruction against an fp32 FMA's 16), VPMADDWD + VPADDD on AVX2 (16 per multiply against 8).
// Per group and output row: y += s·d_g·Σ(q − c)·x̃ + (b + c·s)·X_g, with X_g = Σ_{j∈g} x_j of the
// unrounded token and c = 2^(bits−1) (centring: the rounding error meets q − c, not q).
#pragma once
#include <cstdint>

namespace qt::kernels {

// AVX2 or higher at the current kernel level, bits 4 or 8, g a multiple of 32 (≤ 128), k of g.
bool affine_i16_gemm_supported(int bits, int64_t k, int64_t g);

// y[m, n] = x[m, k]·Wᵀ (+ bias[n] when not null) for W's codes [n, k·bits/8] (MLX packing: element
// 2i in the low nibble of byte i) with scales and biases [n, k/g]. OpenMP over groups of 64 output
// rows and slices of tokens.
void affine_i16_gemm(int bits, const uint8_t* codes, const float* scales, const float* biases, int64_t n, int64_t k,
                     int64_t g, const float* x, int64_t m, const float* bias, float* y);

}  // namespace qt::kernels
