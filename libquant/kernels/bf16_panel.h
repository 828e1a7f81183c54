// The bf16 GEMMs' weight panel (gemm_bf16_avx512.cpp at its NR, gemm_amx_bf16.cpp at NR = 32): per
// k-pair, NR output features × 2 interleaved bf16 — the operand layout of VDPBF16PS and of an AMX
// B tile — with K padded by zeros to Kp (even; the AMX kernel pads to its 32-wide k-group); and the
// activations' bf16 rows with the same padding.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "libquant/kernels/bf16.h"

namespace qt::kernels {

// Rows n0 .. n0+cols of w [N, K] into dst (NR·Kp bf16); features past cols are zero.
template <int NR>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma"))) inline void pack_bf16_panel(
    const float* w, int64_t K, int64_t Kp, int64_t n0, int cols, void* dst) {
  auto d = static_cast<uint16_t*>(dst);
  auto d32 = static_cast<uint32_t*>(dst);
  if (cols < NR || Kp != K) std::memset(d, 0, sizeof(uint16_t) * NR * size_t(Kp));  // padding
  alignas(64) uint32_t pairs[16];
  for (int j = 0; j < cols; ++j) {
    const float* row = w + (n0 + j) * K;
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {  // 16 pairs rounded at once, then scattered to their k-pair rows
      __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + k + 16), _mm512_loadu_ps(row + k));
      _mm512_store_si512(pairs, (__m512i)v);
      uint32_t* o = d32 + (k / 2) * NR + j;
      for (int i = 0; i < 16; ++i) o[i * NR] = pairs[i];
    }
    for (; k < K; ++k) d[(k / 2) * 2 * NR + 2 * j + (k & 1)] = round_bf16(row[k]);
  }
}

// Row-major bf16 copy of x [rows, K] into dst [rows, Kp], K padded by zeros to Kp (the A operand
// of both kernels, rounded as the panel is).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma"))) inline void convert_bf16_rows(
    const float* x, int64_t rows, int64_t K, int64_t Kp, void* dst) {
  auto d = static_cast<uint16_t*>(dst);
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = x + r * K;
    uint16_t* o = d + r * Kp;
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + k + 16), _mm512_loadu_ps(s + k));
      _mm512_storeu_si512(o + k, (__m512i)v);
    }
    for (; k < K; ++k) o[k] = round_bf16(s[k]);
    for (; k < Kp; ++k) o[k] = 0;
  }
}

}  // namespace qt::kernels
