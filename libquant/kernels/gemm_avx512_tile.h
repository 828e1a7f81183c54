// What the AVX-512 GEMM microkernels (gemm_f32_avx512.cpp, gemm_bf16_avx512.cpp) share: a tile's
// epilogue over its R×NV zmm accumulators of fp32 sums (each kernel fills them its own way), and
// the dispatch of a tile's row count to its instance.
#pragma once
#include <immintrin.h>

#include <cstdint>

// The base AVX-512 set both kernels have; inlined into either (the bf16 kernel's set contains it).
#define QT_AVX512_TILE __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"), always_inline))

namespace qt::kernels {

// The lanes of zmm column j (16 output features) that hold one of the tile's `cols` features.
QT_AVX512_TILE inline __mmask16 tile_col_mask(int cols, int j) {
  int r = cols - 16 * j;
  return r >= 16 ? __mmask16(0xffff) : r <= 0 ? __mmask16(0) : __mmask16((1u << r) - 1);
}

// c (ldc floats per row) = acc + (bias, or 0 when null) on the first k-slice, else c += acc; only
// the tile's `cols` output features are read and written.
template <int R, int NV>
QT_AVX512_TILE inline void store_tile(const __m512 (&acc)[R][NV], int cols, float* c, int64_t ldc, bool first,
                                      const float* bias) {
  __mmask16 mk[NV];
  __m512 bb[NV];
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) {
    mk[j] = tile_col_mask(cols, j);
    bb[j] = bias ? _mm512_maskz_loadu_ps(mk[j], bias + 16 * j) : _mm512_setzero_ps();
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
      float* p = c + i * ldc + 16 * j;
      __m512 old = first ? bb[j] : _mm512_maskz_loadu_ps(mk[j], p);
      _mm512_mask_storeu_ps(p, mk[j], _mm512_add_ps(acc[i][j], old));
    }
}

// tile.operator()<rows>() for rows in 1..MR.
template <int MR, class Tile>
inline void with_tile_rows(int rows, Tile&& tile) {
  if constexpr (MR >= 1) {
    if (rows == MR) return tile.template operator()<MR>();
    with_tile_rows<MR - 1>(rows, tile);
  }
}

}  // namespace qt::kernels
