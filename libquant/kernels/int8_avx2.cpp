// AVX2 int8 GEMM (int8_avx2.h). VPMADDUBSW multiplies unsigned by signed bytes and adds pairs into
// int16 with saturation, so the operands are made saturation-free the way llama.cpp's AVX2 q8
// dot products do: |w| as the unsigned operand (≤ 128, −128 included) and a·sign(w) as the signed
// one (|a| ≤ 127 since activations are scaled by absmax/127): each pair sum is at most
// 2·128·127 = 32512 < 2^15. VPMADDWD with ones widens to int32, and the int32 sums are exact, so
// the summation order inside a group does not matter. The fp32 epilogue runs in the reference
// order without contraction.
#pragma GCC optimize("fp-contract=off")
#include "libquant/kernels/int8_avx2.h"

#include <immintrin.h>
#include <omp.h>

namespace qt::kernels {
namespace {

__attribute__((target("avx2"))) inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// R output rows × T tokens at (n0, t0): per group, R·T int32 accumulators over the group's
// 32-byte steps, reduced and folded into the fp32 sums in group order.
template <int R, int T>
__attribute__((target("avx2"))) void block(const int8_t* q, const float* s, int64_t n, int64_t k, int64_t gl,
                                           const int8_t* a, const float* sx, float* y, int64_t n0, int64_t t0) {
  const int64_t ng = k / gl;
  const __m256i ones = _mm256_set1_epi16(1);
  float sum[R][T] = {};
  for (int64_t g = 0; g < ng; ++g) {
    __m256i acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_si256();
    for (int64_t kk = g * gl; kk < (g + 1) * gl; kk += 32) {
      __m256i w[R], uw[R];
      for (int r = 0; r < R; ++r) {
        w[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + (n0 + r) * k + kk));
        uw[r] = _mm256_abs_epi8(w[r]);
      }
      for (int t = 0; t < T; ++t) {
        const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + (t0 + t) * k + kk));
        for (int r = 0; r < R; ++r) {
          const __m256i p16 = _mm256_maddubs_epi16(uw[r], _mm256_sign_epi8(av, w[r]));
          acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(p16, ones));
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float sw = s[(n0 + r) * ng + g];
      for (int t = 0; t < T; ++t) {
        const float prod = sw * float(hsum_epi32(acc[r][t]));
        sum[r][t] = sum[r][t] + prod;
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[(t0 + t) * n + n0 + r] = sx[t0 + t] * sum[r][t];
}

template <int R>
void rows(const int8_t* q, const float* s, int64_t n, int64_t k, int64_t gl, const int8_t* a, const float* sx,
          int64_t m, float* y, int64_t n0) {
  int64_t t0 = 0;
  for (; t0 + 4 <= m; t0 += 4) block<R, 4>(q, s, n, k, gl, a, sx, y, n0, t0);
  for (; t0 < m; ++t0) block<R, 1>(q, s, n, k, gl, a, sx, y, n0, t0);
}

}  // namespace

void gemm_s8s8_avx2(const int8_t* q, const float* s, int64_t n, int64_t k, int64_t gl, const int8_t* a,
                    const float* sx, int64_t m, float* y) {
  const int64_t pairs = (n + 1) / 2;
#pragma omp parallel for schedule(dynamic, 8) if (m * n * k > (1 << 17))
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t n0 = 2 * p;
    if (n0 + 2 <= n) {
      rows<2>(q, s, n, k, gl, a, sx, m, y, n0);
    } else {
      rows<1>(q, s, n, k, gl, a, sx, m, y, n0);
    }
  }
}

}  // namespace qt::kernels
