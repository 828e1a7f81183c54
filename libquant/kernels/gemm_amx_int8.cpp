// AMX int8 GEMM (int8_amx.h): TDPBUSD of a 16-token × 64-byte A tile (codes + 128, unsigned) by a
// 16-quad × 16-row B tile of one weight panel (signed) into 16 × 16 int32 sums; a tile of work is
// up to 2 × 2 C tiles (32 tokens × 2 panels) per group. The epilogue is int8_vnni.cpp's, compiled
// without FMA contraction like it, so every float op rounds as there.
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "libquant/kernels/amx_tile.h"
#include "libquant/kernels/int8_amx.h"

#define QT_AMX_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace qt::kernels {
namespace {

constexpr int kRows = 32;   // tokens per work tile: two A tiles
constexpr int kPanels = 2;  // weight panels per work tile: two B tiles
constexpr int kQuads = 16;  // k-quads per tile step (64 bytes of k)

// acc[r][q·16 + j] = Σ_{k ∈ [s0, s1) quads} au[r, k] · w[p0 + q, j, k] over RT A tiles and CT panels.
template <int RT, int CT>
void group_sums(const uint8_t* a, int64_t lda, const uint8_t* b0, const uint8_t* b1, int64_t s0, int64_t s1,
                int32_t* acc) {
  _tile_zero(0);
  if constexpr (CT > 1) _tile_zero(1);
  if constexpr (RT > 1) {
    _tile_zero(2);
    if constexpr (CT > 1) _tile_zero(3);
  }
  for (int64_t s = s0; s < s1; s += kQuads) {
    _tile_loadd(6, b0 + s * 64, 64);
    if constexpr (CT > 1) _tile_loadd(7, b1 + s * 64, 64);
    _tile_loadd(4, a + s * 4, lda);
    _tile_dpbusd(0, 4, 6);
    if constexpr (CT > 1) _tile_dpbusd(1, 4, 7);
    if constexpr (RT > 1) {
      _tile_loadd(5, a + 16 * lda + s * 4, lda);
      _tile_dpbusd(2, 5, 6);
      if constexpr (CT > 1) _tile_dpbusd(3, 5, 7);
    }
  }
  constexpr int ldo = kPanels * 16 * 4;
  _tile_stored(0, acc, ldo);
  if constexpr (CT > 1) _tile_stored(1, acc + 16, ldo);
  if constexpr (RT > 1) {
    _tile_stored(2, acc + 16 * kPanels * 16, ldo);
    if constexpr (CT > 1) _tile_stored(3, acc + 16 * kPanels * 16 + 16, ldo);
  }
}

using GroupSums = void (*)(const uint8_t*, int64_t, const uint8_t*, const uint8_t*, int64_t, int64_t, int32_t*);
constexpr GroupSums kGroupSums[2][2] = {{group_sums<1, 1>, group_sums<1, 2>}, {group_sums<2, 1>, group_sums<2, 2>}};

// One work tile: tokens [t0, t0 + rows) × panels [p0, p0 + panels). The group epilogue is
// int8_vnni.cpp's tile: sum_g = (g == 0 ? 0 : sum_{g-1}) + s_w · float(acc_g − 128·Σw), then
// y = s_x · sum.
QT_AMX_AVX512 void work_tile(const Int8Vnni& w, int64_t p0, int panels, const uint8_t* a, int rows, const float* sx,
                             float* y, int64_t ldy, __mmask16 last_mask) {
  amx_configure_thread();
  const int rt = rows > 16 ? 2 : 1;
  int64_t lda = w.k;
  if (rows != 16 * rt) {
    // An A tile reads 16 rows: a short row block is copied where the rows past it can be read;
    // their sums are computed and dropped.
    thread_local std::vector<uint8_t> rows_copy;
    rows_copy.resize(size_t(kRows) * size_t(w.k));
    for (int i = 0; i < rows; ++i) std::memcpy(rows_copy.data() + i * w.k, a + i * w.k, size_t(w.k));
    a = rows_copy.data();
  }
  __asm__ volatile("" ::: "memory");  // the tile loads' asm names no memory operand: the copy lands first
  const auto* base = reinterpret_cast<const uint8_t*>(w.panels.data());
  const int64_t k4 = w.k / 4, g4 = w.gl / 4;
  const uint8_t* b0 = base + size_t(p0 * k4 * 64);
  const uint8_t* b1 = panels > 1 ? base + size_t((p0 + 1) * k4 * 64) : b0;
  const GroupSums sums = kGroupSums[rt - 1][panels - 1];
  alignas(64) int32_t acc[kRows][kPanels * 16];
  alignas(64) float sum[kRows][kPanels * 16];
  for (int64_t g = 0; g < w.ng; ++g) {
    sums(a, lda, b0, b1, g * g4, (g + 1) * g4, &acc[0][0]);
    for (int q = 0; q < panels; ++q) {
      const size_t off = size_t(((p0 + q) * w.ng + g) * 16);
      const __m512i cs = _mm512_loadu_si512(w.colsum128.data() + off);
      const __m512 sw = _mm512_loadu_ps(w.scales.data() + off);
      for (int r = 0; r < rows; ++r) {
        const __m512 d =
            _mm512_mul_ps(sw, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(&acc[r][16 * q]), cs)));
        const __m512 prev = g == 0 ? _mm512_setzero_ps() : _mm512_load_ps(&sum[r][16 * q]);
        _mm512_store_ps(&sum[r][16 * q], _mm512_add_ps(prev, d));
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    const __m512 s = _mm512_set1_ps(sx[r]);
    for (int q = 0; q < panels; ++q)
      _mm512_mask_storeu_ps(y + r * ldy + (p0 + q) * 16, q == panels - 1 ? last_mask : __mmask16(0xFFFF),
                            _mm512_mul_ps(s, _mm512_load_ps(&sum[r][16 * q])));
  }
}

}  // namespace

void gemm_int8_amx_f32(const Int8Vnni& w, const float* x, int64_t m, float* y) {
  thread_local std::vector<uint8_t> au;
  thread_local std::vector<float> sx;
  au.resize(size_t(m * w.k));
  sx.resize(size_t(m));
  uint8_t* aq = au.data();
  float* sp = sx.data();
#pragma omp parallel for schedule(static) if (m * w.k > (1 << 15))
  for (int64_t t = 0; t < m; ++t) quantize_token_u8_vnni(x + t * w.k, w.k, aq + t * w.k, sp + t);
  gemm_u8_amx(w, aq, sp, m, y);
}

void gemm_u8_amx(const Int8Vnni& w, const uint8_t* ap, const float* sx, int64_t m, float* y) {
  const int64_t row_blocks = (m + kRows - 1) / kRows, col_blocks = (w.n_panels + kPanels - 1) / kPanels;
  const int64_t tiles = col_blocks * row_blocks;
  const bool par = m * w.n * w.k > (1 << 18);
  // Row blocks innermost: a tile's panels stay in L2 while the token rows pass.
#pragma omp parallel for schedule(dynamic, 4) if (par)
  for (int64_t i = 0; i < tiles; ++i) {
    const int64_t p0 = i / row_blocks * kPanels, rb = i % row_blocks;
    const int64_t t0 = rb * kRows;
    const int rows = int(std::min<int64_t>(kRows, m - t0));
    const int panels = int(std::min<int64_t>(kPanels, w.n_panels - p0));
    const int cols = int(std::min<int64_t>(16, w.n - (p0 + panels - 1) * 16));
    work_tile(w, p0, panels, ap + t0 * w.k, rows, sx + t0, y + t0 * w.n, w.n, __mmask16((1u << cols) - 1));
  }
}

}  // namespace qt::kernels
