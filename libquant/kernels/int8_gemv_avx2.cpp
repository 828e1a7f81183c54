// int8_gemv_avx2.h: VPMADDUBSW on |w| and a·sign(w), as int8_avx2.cpp does (why it cannot
// saturate is written there), four rows at a time. The four rows' int32 group sums are reduced
// together by three VPHADDDs and the epilogue runs on the four lanes at once: per lane the same
// fp32 multiply, add and final scale as the scalar epilogue (no contraction), so the same bits.
#pragma GCC optimize("fp-contract=off")
#include "libquant/kernels/int8_gemv_avx2.h"

#include <immintrin.h>

namespace qt::kernels {
namespace {

#define QT_AVX2 __attribute__((target("avx2")))

// Each 64-byte line of the rows kPrefetch blocks of 4 rows ahead is asked for while this block
// runs: a thread's rows are one sequential stream, yet on the device machine's Xeon (AVX2 level,
// 2 threads) SmolLM2's W8A8 decode went from 60-71 to 91-118 tok/s (1, 2 and 4 blocks alike).
constexpr int64_t kPrefetch = 2;

// Σ of each of four int32 ymm: lane r of the result is row r's sum (exact: int32 adds).
QT_AVX2 inline __m128i hsum4_epi32(__m256i a0, __m256i a1, __m256i a2, __m256i a3) {
  const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(a0, a1), _mm256_hadd_epi32(a2, a3));
  return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

// R rows from r0 (R = 4, or 1 for the tail: then lanes 1..3 are unused copies of row r0).
template <int R>
QT_AVX2 void rows(const int8_t* q, const float* s, int64_t k, int64_t gl, const int8_t* a, float sx, int64_t r0,
                  float* y) {
  const int64_t ng = k / gl;
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* row[4];
  for (int r = 0; r < 4; ++r) row[r] = q + (r0 + (r < R ? r : 0)) * k;
  __m128 sum = _mm_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    __m256i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
    for (int64_t kk = g * gl; kk < (g + 1) * gl; kk += 32) {
      const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + kk));
      if (((kk - g * gl) & 63) == 0)
        for (int r = 0; r < R; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(row[r] + kPrefetch * 4 * k + kk), _MM_HINT_T0);
      for (int r = 0; r < R; ++r) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[r] + kk));
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(av, w));
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(p16, ones));
      }
    }
    __m128i tot;
    if constexpr (R == 4) {
      tot = hsum4_epi32(acc[0], acc[1], acc[2], acc[3]);
    } else {
      tot = hsum4_epi32(acc[0], acc[0], acc[0], acc[0]);
    }
    const int64_t r1 = R == 4 ? 1 : 0, r2 = R == 4 ? 2 : 0, r3 = R == 4 ? 3 : 0;
    const __m128 sw = _mm_setr_ps(s[r0 * ng + g], s[(r0 + r1) * ng + g], s[(r0 + r2) * ng + g], s[(r0 + r3) * ng + g]);
    sum = _mm_add_ps(sum, _mm_mul_ps(sw, _mm_cvtepi32_ps(tot)));
  }
  alignas(16) float out[4];
  _mm_store_ps(out, _mm_mul_ps(_mm_set1_ps(sx), sum));
  for (int r = 0; r < R; ++r) y[r0 + r] = out[r];
}

}  // namespace

void gemv_s8s8_avx2(const int8_t* q, const float* s, int64_t k, int64_t gl, const int8_t* a, float sx, int64_t r0,
                    int64_t r1, float* y) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) rows<4>(q, s, k, gl, a, sx, r, y);
  for (; r < r1; ++r) rows<1>(q, s, k, gl, a, sx, r, y);
}

}  // namespace qt::kernels
