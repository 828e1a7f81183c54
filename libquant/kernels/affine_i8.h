// MLX affine 4-bit weights (w = s_g·q + b_g, q in 0..15, per group of g inputs) against int8
// activations: llama.cpp's Q4_1 × Q8_1 arithmetic (ggml-cpu's ggml_vec_dot_q4_1_q8_1). A token is
// quantized per group of g (or, per_token, with one step for the whole token): d = max|x| / 127,
// x̃ = round-to-nearest-even(x / d) in −127..127, and X = Σ x̃ per group. Then per output row
//   y = Σ_g (s_g·d_g)·Σ_{j∈g} q_j·x̃_j + b_g·(d_g·X_g)
// where Σ q·x̃ is an exact int32 — unsigned codes against signed activations are VPDPBUSD's operands
// as they are (AVX-512 VNNI), and VPMADDUBSW's on AVX2 (15·127·2 cannot saturate its int16 pairs).
// The float order, the same at every level: per group, in order from 0.0f,
//   sum = fma(b_g, bx_g, sum); sum = fma(float(acc_g), s_g·d_g, sum)
// with bx_g = d_g·float(X_g) rounded once when the token is quantized; then y = sum (+ bias[n]).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "libquant/kernels/uninit_vector.h"

namespace qt::kernels {

// The weights repacked once for the kernels: panels of 16 output rows; per panel and octet o of k
// (k = 8o..8o+7), 64 bytes where byte 4r + j holds row r's code at 8o + j (low nibble) and at
// 8o + 4 + j (high nibble) — each nibble plane is one VPDPBUSD operand (4 consecutive k of 16 rows).
struct AffineI8 {
  int64_t n = 0, k = 0, g = 0, ng = 0, n_panels = 0;
  UninitVector<uint8_t> panels;       // [n_panels][k/8][64]
  std::vector<float> scales, biases;  // [n_panels][ng][16] (rows past n: 0)
  size_t bytes() const { return panels.size() + (scales.size() + biases.size()) * 4; }
};

// bits 4, g a multiple of 8, k a multiple of g.
bool affine_i8_supports(int bits, int64_t k, int64_t g);

// codes: [n, k/2] bytes in MLX's packing (element 2i the low nibble of byte i); scales, biases [n, k/g].
AffineI8 pack_affine_i8(const uint8_t* codes, const float* scales, const float* biases, int64_t n, int64_t k,
                        int64_t g);

// One token: x̃ [k], and per group d [k/g] and bx [k/g] as above (per_token: one d for every group).
// The scalar spec; quantize_token_i8 gives the same bytes and floats at every kernel level.
void quantize_token_i8_ref(const float* x, int64_t k, int64_t g, bool per_token, int8_t* q, float* d, float* bx);
void quantize_token_i8(const float* x, int64_t k, int64_t g, bool per_token, int8_t* q, float* d, float* bx);

// The scalar spec of the GEMM from the MLX codes and quantized tokens (q [m, k], d and bx [m, k/g]).
void affine_i8_gemm_ref(const uint8_t* codes, const float* scales, const float* biases, int64_t n, int64_t k, int64_t g,
                        const int8_t* q, const float* d, const float* bx, int64_t m, const float* bias, float* y);

// y[m, n] = x[m, k]·Wᵀ (+ bias) through the kernel level's tiles (AMX-INT8 from 16 tokens where the
// group is a multiple of 64, AVX-512 VNNI, AVX2; scalar: the spec on the packed codes), tokens
// quantized first; OpenMP over tiles. The same bits as
// quantize_token_i8_ref + affine_i8_gemm_ref.
void affine_i8_gemm(const AffineI8& w, const float* x, int64_t m, bool per_token, const float* bias, float* y);
// One token over panels [p0, p1) on the calling thread (the decode step's slices): the same bits
// as affine_i8_gemm's row of that token; bias and y indexed from row 0. Needs a SIMD level
// (affine_i8_slices_supported).
bool affine_i8_slices_supported();
void affine_i8_gemv_panels(const AffineI8& w, const float* x, bool per_token, int64_t p0, int64_t p1, const float* bias,
                           float* y);

namespace i8 {  // between the driver (affine_i8_gemm.cpp) and the tiles (affine_i8_vnni.cpp, affine_i8_avx2.cpp)
struct TileArgs {
  const AffineI8* w;
  int64_t p0;           // first panel
  const int8_t* a;      // R token rows of x̃, stride k
  const float *d, *bx;  // [R][ng]
  const float* bias;    // at panel p0's first row, or null
  float* y;             // at (first token, panel p0's first row), stride ldy
  int64_t ldy;
  int last_cols;  // rows of the tile's last panel that exist (1..16)
};
struct Isa {
  int mr, np;  // token rows and panels per tile
  void (*tile)(const TileArgs& t, int rows, int panels);
  void (*quantize)(const float* x, int64_t k, int64_t g, bool per_token, int8_t* q, float* d, float* bx);
};
const Isa& isa_vnni();
const Isa& isa_avx2();
// AMX-INT8 (gemm_amx_affine_i8.cpp), for groups of whole 64-byte tile rows: q [m, k] the tokens'
// x̃, d and bx as the tiles read them; y [m, n].
bool amx_supports(const AffineI8& w);
void gemm_amx(const AffineI8& w, const int8_t* q, const float* d, const float* bx, int64_t m, const float* bias,
              float* y);
}  // namespace i8

}  // namespace qt::kernels
