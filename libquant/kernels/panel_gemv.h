// One token through the dense families' panels (gemm.h's Family::gemv): up to four panels walked
// side by side, every byte asked for 2 KiB before it is read. The families' tiles at one row
// already stream a panel once, but one panel at a time with only the hardware prefetcher they
// read ~75% of the memory rate in the decode step (2-core Xeon, bf16-avx512 at 2 threads: 74%,
// the AMX tile with 15 padding rows 61–65%) — the fix the GGUF groups needed too
// (ggml_interleaved.cpp's gemv_groups).
//
// Both panel kinds hold 4 bytes per output feature per step: f32 one k, bf16 one k-pair (NR
// features × 2 interleaved bf16, VDPBF16PS's operand). The sums are the tile's at one row: per
// lane in k order, restarted every kc values and added to the stored result (acc + bias on the
// first slice, as store_tile does), so f32 and bf16-avx512 give their tiles' bits.
//
// The including file defines QT_PANEL_GEMV_TARGET (its own target attribute) first: the bf16 step
// needs AVX512-BF16, which the f32 family's CPUs may lack.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "libquant/kernels/gemm_avx512_tile.h"

namespace qt::kernels::panel_gemv_detail {

constexpr size_t kAhead = 2048;

// y[0, cols) for kCount panels at panel0 + c·stride (cols ≤ kCount·NR; the rest of the panels'
// features are computed and dropped). a: the token (f32, or bf16 pairs), kp values; kc: the
// families' k slice.
template <int NR, bool kBf16, int kCount>
QT_PANEL_GEMV_TARGET void gemv_panels(const void* a, const char* panel0, size_t stride, int64_t kp, int64_t kc,
                                      const float* bias, int cols, float* y) {
  constexpr int NV = NR / 16;
  constexpr int64_t kStep = NR * 4;  // bytes of one panel per step
  const int64_t steps = kBf16 ? kp / 2 : kp, slice = std::max<int64_t>(1, kBf16 ? kc / 2 : kc);
  for (int64_t s0 = 0; s0 < steps; s0 += slice) {
    const int64_t s1 = std::min(steps, s0 + slice);
    __m512 acc[kCount][NV];
    for (int n = 0; n < kCount; ++n)
      for (int j = 0; j < NV; ++j) acc[n][j] = _mm512_setzero_ps();
    for (int64_t s = s0; s < s1; ++s) {
      int32_t word;  // the step's k value, or k-pair
      std::memcpy(&word, static_cast<const char*>(a) + 4 * s, 4);
      for (int n = 0; n < kCount; ++n) {
        const char* b = panel0 + size_t(n) * stride + size_t(s) * kStep;
        for (int64_t o = 0; o < kStep; o += 64) _mm_prefetch(b + kAhead + o, _MM_HINT_T0);
        for (int j = 0; j < NV; ++j) {
          if constexpr (kBf16)
            acc[n][j] =
                _mm512_dpbf16_ps(acc[n][j], (__m512bh)_mm512_set1_epi32(word), (__m512bh)_mm512_load_si512(b + 64 * j));
          else
            acc[n][j] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_set1_epi32(word)),
                                        _mm512_load_ps(reinterpret_cast<const float*>(b + 64 * j)), acc[n][j]);
        }
      }
    }
    for (int n = 0; n < kCount; ++n)
      for (int j = 0; j < NV; ++j) {
        const int at = n * NR + 16 * j;
        const __mmask16 mk = tile_col_mask(cols - at, 0);
        const __m512 old = s0 > 0 ? _mm512_maskz_loadu_ps(mk, y + at)
                           : bias ? _mm512_maskz_loadu_ps(mk, bias + at)
                                  : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(y + at, mk, _mm512_add_ps(acc[n][j], old));
      }
  }
}

// Family::gemv over panels [p0, p1) of a matrix of n features: y and bias at feature p0·NR.
template <int NR, bool kBf16>
void gemv(const void* a, const void* panels, size_t panel_bytes, int64_t p0, int64_t p1, int64_t n, int64_t kp,
          int64_t kc, const float* bias, float* y) {
  const char* base = static_cast<const char*>(panels);
  for (int64_t p = p0; p < p1; p += 4) {
    const int count = int(std::min<int64_t>(4, p1 - p));
    const int cols = int(std::min<int64_t>(int64_t(count) * NR, n - p * NR));
    const char* first = base + size_t(p) * panel_bytes;
    const float* b = bias ? bias + (p - p0) * NR : nullptr;
    float* out = y + (p - p0) * NR;
    switch (count) {
      case 4: gemv_panels<NR, kBf16, 4>(a, first, panel_bytes, kp, kc, b, cols, out); break;
      case 3: gemv_panels<NR, kBf16, 3>(a, first, panel_bytes, kp, kc, b, cols, out); break;
      case 2: gemv_panels<NR, kBf16, 2>(a, first, panel_bytes, kp, kc, b, cols, out); break;
      default: gemv_panels<NR, kBf16, 1>(a, first, panel_bytes, kp, kc, b, cols, out);
    }
  }
}

}  // namespace qt::kernels::panel_gemv_detail
