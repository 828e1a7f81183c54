// affine_i16_gemm.h on AVX2: VPMADDWD multiplies code × token pairs into int32 and VPADDD sums
// them — 16 multiply-adds per multiply µop against an fp32 FMA's 8, at the same two per cycle on
// Zen 3 (measured). A tile is R token rows × one panel of 16 output rows (two ymm): 2R int32
// accumulators over one group's k-pairs, then the group's float epilogue, as the VNNI tile.
#include <immintrin.h>

#include <cstring>

#include "libquant/kernels/affine_i16_detail.h"
#include "libquant/kernels/hsum_avx2.h"

namespace qt::kernels::i16 {
namespace {

#define QT_AVX2 __attribute__((target("avx2,fma")))

constexpr int kMR = 4;

QT_AVX2 float hmax8(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

QT_AVX2 void round_token(const float* x, int64_t k, int64_t g, int16_t* q, float* d, float* xs) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t g0 = 0, gi = 0; g0 < k; g0 += g, ++gi) {
    __m256 amax = _mm256_setzero_ps(), sum = _mm256_setzero_ps();
    for (int64_t j = g0; j < g0 + g; j += 8) {
      const __m256 v = _mm256_loadu_ps(x + j);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v));
      sum = _mm256_add_ps(sum, v);
    }
    const float a = hmax8(amax);
    // (below 1e-30, 32767 / a could overflow to inf; such a group rounds to zeros)
    const __m256 inv = _mm256_set1_ps(a > 1e-30f ? 32767.0f / a : 0.0f);
    d[gi] = a / 32767.0f;
    xs[gi] = hsum8(sum);
    for (int64_t j = g0; j < g0 + g; j += 16) {
      const __m256i lo = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), inv));
      const __m256i hi = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8), inv));
      // packs interleaves 128-bit halves; the permute puts lo's eight before hi's.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + j),
                          _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8));
    }
  }
}

// One group's int32 sums of one panel against R token rows (its own function so GCC keeps the
// 2R accumulators in registers, as in the VNNI tile).
template <int R>
QT_AVX2 __attribute__((noinline)) void group_sums(const int32_t* pan, const int16_t* a, int64_t lda, int64_t i0,
                                                  int64_t i1, int32_t* acc_out) {
  __m256i acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int64_t i = i0; i < i1; ++i) {
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pan + i * 16));
    const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pan + i * 16 + 8));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * i, 4);
      const __m256i av = _mm256_set1_epi32(pair);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, w0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, w1));
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(acc_out + r * 16), acc[r][0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(acc_out + r * 16 + 8), acc[r][1]);
  }
}

template <int R>
QT_AVX2 void tile(const TileArgs& t, int np) {
  const int64_t k2 = t.k / 2, groups = t.k / t.g;
  for (int q = 0; q < np; ++q) {
    const int32_t* pan = t.pan + q * k2 * 16;
    alignas(32) float sum[R][16] = {};
    alignas(32) int32_t acc[R][16];
    for (int64_t gi = 0; gi < groups; ++gi) {
      group_sums<R>(pan, t.a, t.k, gi * t.g / 2, (gi + 1) * t.g / 2, &acc[0][0]);
      const float* sp = t.st + (q * groups + gi) * 16;
      const float* bp = t.bt + (q * groups + gi) * 16;
      for (int h = 0; h < 2; ++h) {
        const __m256 sv = _mm256_load_ps(sp + 8 * h), bv = _mm256_load_ps(bp + 8 * h);
        for (int r = 0; r < R; ++r) {
          __m256 s = _mm256_fmadd_ps(bv, _mm256_set1_ps(t.xs[r * groups + gi]), _mm256_load_ps(sum[r] + 8 * h));
          s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(acc[r] + 8 * h))),
                              _mm256_mul_ps(sv, _mm256_set1_ps(t.d[r * groups + gi])), s);
          _mm256_store_ps(sum[r] + 8 * h, s);
        }
      }
    }
    const int cols = q == np - 1 ? t.last_cols : 16;
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < cols; ++c) t.y[r * t.ldy + q * 16 + c] = sum[r][c] + (t.bias ? t.bias[q * 16 + c] : 0.0f);
  }
}

void run_tile(const TileArgs& t, int rows, int np) {
  switch (rows) {
    case 4: return tile<4>(t, np);
    case 3: return tile<3>(t, np);
    case 2: return tile<2>(t, np);
    default: return tile<1>(t, np);
  }
}

}  // namespace

const Isa& isa_avx2() {
  static const Isa is{kMR, round_token, run_tile};
  return is;
}

}  // namespace qt::kernels::i16
