// One token through MLX affine weights (4- or 8-bit codes, fp32 scales and biases) as MLX's own
// qmv does it: per row, y = Σ_g s_g·(Σ_{j∈g} q_j·x_j) + Σ_g b_g·X_g with X_g = Σ_{j∈g} x_j summed
// once per token for all rows. The codes go from bytes to fp32 and straight into FMAs (no
// dequantized weight in memory, no per-weight multiply by the scale, no per-weight add of the bias),
// so the loop is close to one load-convert-FMA per 8 or 16 codes — decode is memory bound.
// The factored sum differs from Σ_j x_j·(q_j·s + b) only in fp32 rounding.
#pragma once
#include <cstdint>
#include <vector>

namespace qt::kernels {

// The token in the order the kernel reads it, and its group sums.
struct AffineGemvInput {
  std::vector<float> x;     // 4-bit: each chunk of 2L values reordered evens then odds (L = lanes)
  std::vector<float> xsum;  // X_g, k / g values
  int lanes = 0;            // L the token was prepared for: the kernel width that reads it
};

// Lanes of the kernel at the current kernel level (8 AVX2, 16 AVX-512; 0: no kernel).
int affine_gemv_lanes();
// True when the kernel takes these parameters (bits 4, or 8 at the AVX-512 level; g a multiple of
// 2·lanes, k of g).
bool affine_gemv_supports(int bits, int64_t k, int64_t g);

void affine_gemv_prepare(int bits, const float* x, int64_t k, int64_t g, AffineGemvInput* in);

// y[r] for rows [r0, r1): codes row r at codes + r·k·bits/8, scales/biases row r at r·(k/g).
// Adds bias[r] when bias is not null. Single-threaded; the caller splits the rows.
void affine_gemv_rows(int bits, const uint8_t* codes, const float* scales, const float* biases, int64_t k, int64_t g,
                      const AffineGemvInput& in, int64_t r0, int64_t r1, const float* bias, float* y);

// bitsandbytes nf4/fp4 (fp32 absmax, blocks inside rows): y = Σ_b absmax_b·Σ_{j∈b} table[q_j]·x_j,
// element 2i in the HIGH nibble of byte i. The 16-entry lookup is two 8-entry permutes and a blend
// (AVX2; the AVX2 kernel also runs at the AVX-512 level).
bool bnb4_gemv_supports(int64_t k, int64_t block);
void bnb4_gemv_prepare(const float* x, int64_t k, int64_t block, AffineGemvInput* in);
void bnb4_gemv_rows(const uint8_t* codes, const float* absmax, const float* table, int64_t k, int64_t block,
                    const AffineGemvInput& in, int64_t r0, int64_t r1, const float* bias, float* y);

}  // namespace qt::kernels
