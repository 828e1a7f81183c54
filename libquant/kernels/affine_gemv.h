// One token through MLX affine weights (4- or 8-bit codes, fp32 scales and biases) in MLX's qmv
// form: per row, y = Σ_g s_g·(Σ_{j∈g} q_j·x_j) + Σ_g b_g·X_g with X_g = Σ_{j∈g} x_j summed once per
// token for all rows. The inner sums run in integers: the token is rounded per group to int16
// (x ≈ d_g·x̃, d_g = max_g|x| / 32767, so each value moves by at most 2^-16 of its group's largest,
// ~100× below bf16's rounding), the codes are zero-extended to int16 and multiplied pairwise into
// int32 (VPMADDWD; VPDPWSSD with AVX-512 VNNI), exactly; one float multiply by s_g·d_g per group.
// The rounding error r_j = x_j − d_g·x̃_j would meet s_g·q_j; adding s_g·c·R_g (c = 2^(bits−1), the
// integer next to the middle code; R_g = Σ r_j from the fp32 group sum X_g) leaves s_g·(q_j − c)·r_j:
// about half as large for codes spread evenly over their range, less for bell-shaped groups.
// Two codes per int16 lane-pair instruction instead of a convert and an FMA per code keeps the
// loop near the memory bandwidth. X_g and the bias term stay in fp32 from the unrounded token.
#pragma once
#include <cstdint>
#include <vector>

namespace qt::kernels {

// The token in the order the kernel reads it, and its group sums.
struct AffineGemvInput {
  std::vector<int16_t> xq;    // affine: x̃, 4-bit: each chunk of 2L values evens then odds (L = lanes)
  std::vector<float> xscale;  // affine: d_g, k / g values
  std::vector<float> xsum;    // affine: X_g, k / g values
  std::vector<float> xres;    // affine: c·R_g, k / g values
  std::vector<float> x;       // nf4/fp4: the fp32 token, chunks of 2L evens then odds
  int lanes = 0;              // L the token was prepared for: the kernel width that reads it
};

// True when the kernel takes these parameters (bits 4 or 8, g ≤ 128 a multiple of 32 and k of g;
// AVX2 or higher).
bool affine_gemv_supports(int bits, int64_t k, int64_t g);

void affine_gemv_prepare(int bits, const float* x, int64_t k, int64_t g, AffineGemvInput* in);

// y[r] for rows [r0, r1): codes row r at codes + r·k·bits/8, scales/biases row r at r·(k/g).
// Adds bias[r] when bias is not null. Single-threaded; the caller splits the rows.
void affine_gemv_rows(int bits, const uint8_t* codes, const float* scales, const float* biases, int64_t k, int64_t g,
                      const AffineGemvInput& in, int64_t r0, int64_t r1, const float* bias, float* y);

// bitsandbytes nf4/fp4 (fp32 absmax, blocks inside rows): y = Σ_b absmax_b·Σ_{j∈b} table[q_j]·x_j,
// element 2i in the HIGH nibble of byte i. The 16-entry lookup is two 8-entry permutes and a blend
// (AVX2), or one 16-entry permute (AVX-512, blocks of a multiple of 32).
bool bnb4_gemv_supports(int64_t k, int64_t block);
void bnb4_gemv_prepare(const float* x, int64_t k, int64_t block, AffineGemvInput* in);
void bnb4_gemv_rows(const uint8_t* codes, const float* absmax, const float* table, int64_t k, int64_t block,
                    const AffineGemvInput& in, int64_t r0, int64_t r1, const float* bias, float* y);

}  // namespace qt::kernels
