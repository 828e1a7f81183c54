// AVX-512 VNNI int8 GEMM for the integer packed Linear (libquant/linear/int_linear.cpp): weights packed in
// panels of 16 output rows, k in blocks of 4 bytes (VPDPBUSD's dword), per-group fp32 scales and
// 128·column sums per panel; activations are the signed per-token int8 codes, offset to unsigned
// inside. Exact int32 accumulation per group; epilogue y = s_x · Σ_g s_w·float(acc_g) with the
// multiply and add rounded separately (reference_gemm's order).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "libquant/kernels/uninit_vector.h"

namespace qt::kernels {

struct Int8Vnni {
  int64_t n = 0, k = 0, gl = 0, ng = 0, n_panels = 0;
  UninitVector<int8_t> panels;     // [n_panels][k/4][16][4]
  std::vector<int32_t> colsum128;  // [n_panels][ng][16]: 128 · Σ_{k∈g} w
  std::vector<float> scales;       // [n_panels][ng][16]
  int8_t code(int64_t row, int64_t col) const {
    const int64_t p = row / 16, r = row % 16;
    return panels[size_t(((p * (k / 4) + col / 4) * 16 + r) * 4 + col % 4)];
  }
  size_t bytes() const { return panels.size() + colsum128.size() * 4 + scales.size() * 4; }
};

// q: [n, k] signed codes; s: [n, k/gl] fp32 scales; k and gl multiples of 4.
Int8Vnni pack_int8_vnni(const int8_t* q, const float* s, int64_t n, int64_t k, int64_t gl);
// y[m, n] = x[m, k] quantized per token times W, OpenMP over (panel, rows): quantizes per token with AVX-512 (the bytes quantize_activations_int8
// gives, offset to unsigned) and runs gemm_u8_vnni.
void gemm_int8_vnni_f32(const Int8Vnni& w, const float* x, int64_t m, float* y);
// gemm_int8_vnni_f32 for count matrices of one k that read the same x (q/k/v, gate/up): x
// quantized once, one OpenMP loop over all their tiles; ys[i] gets gemm_int8_vnni_f32's bits.
void gemm_int8_vnni_f32_shared(const Int8Vnni* const* ws, int count, const float* x, int64_t m, float* const* ys);
// The GEMM on quantized activations: au = the codes + 128 as bytes, sx their scales.
void gemm_u8_vnni(const Int8Vnni& w, const uint8_t* au, const float* sx, int64_t m, float* y);

// The decode step's pieces, single-threaded: one token's codes + 128 (quantize_activations_int8's
// bytes, flipped) and its scale; then y over panels [p0, p1) by the GEMM's own tiles at one row
// (the same bits as gemm_u8_vnni).
void quantize_token_u8_vnni(const float* x, int64_t k, uint8_t* au, float* sx);
void gemv_u8_vnni(const Int8Vnni& w, const uint8_t* au, float sx, int64_t p0, int64_t p1, float* y);

}  // namespace qt::kernels
