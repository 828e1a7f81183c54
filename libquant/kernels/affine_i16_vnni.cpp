// affine_i16_gemm.h on AVX-512 VNNI. The tile is int8_vnni.cpp's with int16 pairs in place of int8
// quads (the same vnni_group_sums): R token rows × NP panels of 16 output rows, R·NP int32
// accumulators over one group's k-pairs, then the group's float epilogue into per-tile sums:
// sum += b·X + float(acc)·(s·d).
#include <immintrin.h>

#include <array>

#include "libquant/kernels/affine_i16_detail.h"
#include "libquant/kernels/vnni_group_sums.h"

namespace qt::kernels::i16 {
namespace {

#define QT_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))

constexpr int kMR = 6;

QT_VNNI void round_token(const float* x, int64_t k, int64_t g, int16_t* q, float* d, float* xs) {
  for (int64_t g0 = 0, gi = 0; g0 < k; g0 += g, ++gi) {
    __m512 amax = _mm512_setzero_ps(), sum = _mm512_setzero_ps();
    for (int64_t j = g0; j < g0 + g; j += 16) {
      const __m512 v = _mm512_loadu_ps(x + j);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
      sum = _mm512_add_ps(sum, v);
    }
    const float a = _mm512_reduce_max_ps(amax);
    // (below 1e-30, 32767 / a could overflow to inf; such a group rounds to zeros)
    const __m512 inv = _mm512_set1_ps(a > 1e-30f ? 32767.0f / a : 0.0f);
    d[gi] = a / 32767.0f;
    xs[gi] = _mm512_reduce_add_ps(sum);
    for (int64_t j = g0; j < g0 + g; j += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + j),
                          _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + j), inv))));
  }
}

template <int R, int NP>
QT_VNNI void tile(const TileArgs& t) {
  const int64_t k2 = t.k / 2, groups = t.k / t.g;
  const uint8_t* pan[NP];
  for (int q = 0; q < NP; ++q) pan[q] = reinterpret_cast<const uint8_t*>(t.pan + q * k2 * 16);
  alignas(64) float sum[R][NP][16] = {};
  alignas(64) int32_t acc[R][NP][16];
  for (int64_t gi = 0; gi < groups; ++gi) {
    vnni_group_sums<VnniDot::S16S16, R, NP>(pan, reinterpret_cast<const uint8_t*>(t.a), 2 * t.k, gi * t.g / 2,
                                            (gi + 1) * t.g / 2, &acc[0][0][0]);
    for (int q = 0; q < NP; ++q) {
      const __m512 sv = _mm512_load_ps(t.st + (q * groups + gi) * 16),
                   bv = _mm512_load_ps(t.bt + (q * groups + gi) * 16);
      for (int r = 0; r < R; ++r) {
        __m512 s = _mm512_fmadd_ps(bv, _mm512_set1_ps(t.xs[r * groups + gi]), _mm512_load_ps(sum[r][q]));
        s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(acc[r][q])),
                            _mm512_mul_ps(sv, _mm512_set1_ps(t.d[r * groups + gi])), s);
        _mm512_store_ps(sum[r][q], s);
      }
    }
  }
  const __mmask16 last = __mmask16((1u << t.last_cols) - 1);
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < NP; ++q) {
      const __mmask16 mask = q == NP - 1 ? last : __mmask16(0xFFFF);
      __m512 v = _mm512_load_ps(sum[r][q]);
      if (t.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, t.bias + q * 16));
      _mm512_mask_storeu_ps(t.y + r * t.ldy + q * 16, mask, v);
    }
}

using TileFn = void (*)(const TileArgs&);
// kTiles[rows][panels]
constexpr auto kTiles = tile_table<TileFn, kMR, kNP>([]<int R, int P>() -> TileFn { return tile<R, P>; });

void run_tile(const TileArgs& t, int rows, int np) { kTiles[size_t(rows)][size_t(np)](t); }

}  // namespace

const Isa& isa_vnni() {
  static const Isa is{kMR, round_token, run_tile};
  return is;
}

}  // namespace qt::kernels::i16
