// fp32 GEMM microkernel for AVX-512 (F+BW+VL+DQ): an MR×NR tile of y in zmm registers,
// NR/16 vector loads of the packed panel and MR embedded broadcasts of x per k.
// Zen 4 / Skylake-X both retire one 512-bit FMA per cycle per port pair; MR×NV = 24
// independent accumulators hide the 4-cycle FMA latency with room to spare.
#include <immintrin.h>

#include <cstring>

#include "libquant/kernels/gemm.h"
#include "libquant/kernels/gemm_avx512_tile.h"

#define QT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define QT_PANEL_GEMV_TARGET QT_AVX512
#include "libquant/kernels/panel_gemv.h"

namespace qt::kernels {
namespace {

constexpr int MR = 8;
constexpr int NV = 3;  // zmm per row
constexpr int NR = NV * 16;
// K slice: no slicing for typical K. Measured on Zen 4: a KC×NR slice that fits L1 (KC ≲ 96)
// costs more in reloads of the C tile than it saves; the panel streams from L2 at full speed.
constexpr int KC = 4096;

template <int R>
QT_AVX512 void tile_r(int cols, int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                      bool first, const float* bias) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) bv[j] = _mm512_load_ps(b + k * NR + 16 * j);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      __m512 av = _mm512_set1_ps(a[i * lda + k]);
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  store_tile<R, NV>(acc, cols, c, ldc, first, bias);
}

void tile(int rows, int cols, int64_t kc, const void* av, int64_t lda, const void* bv, float* c, int64_t ldc,
          bool first, const float* bias) {
  auto a = static_cast<const float*>(av);
  auto b = static_cast<const float*>(bv);
  with_tile_rows<MR>(rows, [&]<int R>() { tile_r<R>(cols, kc, a, lda, b, c, ldc, first, bias); });
}

// r[i] (row i, 16 values) -> r[c] (column c: row 0..15's values): unpack pairs of rows, then pairs
// of pairs (64-bit), then gather the 128-bit lanes in two rounds.
QT_AVX512 inline __m512d pd(__m512 v) { return _mm512_castps_pd(v); }

QT_AVX512 inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int q = 0; q < 16; q += 4) {  // r[q + c], 128-bit lane L: column 4L + c of rows q..q+3
    r[q] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[q]), pd(t[q + 2])));
    r[q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[q]), pd(t[q + 2])));
    r[q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[q + 1]), pd(t[q + 3])));
    r[q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[q + 1]), pd(t[q + 3])));
  }
  for (int c = 0; c < 4; ++c) {  // lanes 0, 2 (0x88) and 1, 3 (0xdd) of row quads (0, 1) and (2, 3)
    t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
    r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xdd);
  }
}

// The panel is k-major (NR values per k): 16×16 blocks of the rows transposed in registers, the
// K tail and the missing rows (cols < NR) as scalars / zeros.
QT_AVX512 void pack_panel(const float* w, int64_t K, int64_t n0, int cols, void* dst) {
  auto d = static_cast<float*>(dst);
  const int64_t k16 = K / 16 * 16;
  for (int64_t k0 = 0; k0 < k16; k0 += 16)
    for (int j0 = 0; j0 < NR; j0 += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = j0 + i < cols ? _mm512_loadu_ps(w + (n0 + j0 + i) * K + k0) : _mm512_setzero_ps();
      transpose16(r);
      for (int c = 0; c < 16; ++c) _mm512_storeu_ps(d + (k0 + c) * NR + j0, r[c]);
    }
  for (int64_t k = k16; k < K; ++k)
    for (int j = 0; j < NR; ++j) d[k * NR + j] = j < cols ? w[(n0 + j) * K + k] : 0.0f;
}

const Family kFamily{
    "f32-avx512", MR, NR, 1, KC, 4, 4, false, pack_panel, nullptr, tile, panel_gemv_detail::gemv<NR, false>,
};

}  // namespace

const Family* family_f32_avx512() { return &kFamily; }

}  // namespace qt::kernels
