// A few tokens (the decode step) against 4-bit codes whose group of 64 (or a multiple) maps each
// code through its own 16-entry table of exact weights: MLX affine (w = s·q + b, each step rounded
// to bf16 for a bf16 model, as MLX's CPU backend computes them) and bitsandbytes NF4/FP4
// (w = table[q]·absmax, rounded likewise). The weights are never stored: each group's 16 weights
// are computed once (the decode's arithmetic, so the same values) and the codes look them up.
//
// Why a kernel of its own: looking a code up with VPERMPS wants it in a dword lane's low 4 bits.
// Widening 16 codes to dwords (VPMOVZXBD) is a shuffle, and with the lookup two shuffles per 16
// codes saturated the one 512-bit shuffle port at 19–31% of the memory rate (8B-shaped decode, 2
// threads, 2-core Xeon). Here a group's 32 code bytes are broadcast to both halves of a zmm (a
// load, no shuffle port) and shifted so that each dword lane's low nibble is a different code:
// lanes 0–7 nibble s of the group's dwords, lanes 8–15 nibble s + 4. Four VPERMPS give the 64
// weights, in an order the token is permuted into once per call (lut4_prepare). One shuffle per
// 16 codes; the sums are fp32 in another order than a row decoded and dotted (within fp32
// rounding of it; test_packed_linear.cpp bounds them against a double reference).
#pragma once
#include <cstddef>
#include <cstdint>

#include "libquant/kernels/affine_weights_avx512.h"

namespace qt::kernels {

// The CPU level this needs (AVX-512 F/BW/DQ/VL with FMA), k a multiple of the group size g, and g
// a multiple of 64.
bool lut4_gemv_supports(int64_t k, int64_t g);

// m tokens x [m, k] into out [m, k] in the kernel's order. high_first: element 2i is the high
// nibble of byte i (bitsandbytes), else the low one (MLX).
void lut4_prepare(const float* x, int64_t m, int64_t k, bool high_first, float* out);

// y[t·n + r] = Σ_j w_rj · x_tj (+ bias[r]) for every row of a codes matrix [n, k/2 bytes] and m
// prepared tokens xp, OpenMP-parallel over rows.
// Affine: scale and bias per group of g (AffineGroupScales), bf16: round each step as MLX does.
void affine4_lut_rows(const uint8_t* codes, const AffineGroupScales& scales, bool bf16, int64_t n, int64_t k, int64_t g,
                      const float* xp, int64_t m, const float* bias, float* y);
// NF4/FP4: absmax per block of bs (fp32), table[16] the scheme's code values, bf16 as above.
void bnb4_lut_rows(const uint8_t* codes, const float* absmax, const float* table, bool bf16, int64_t n, int64_t k,
                   int64_t bs, const float* xp, int64_t m, const float* bias, float* y);

}  // namespace qt::kernels
