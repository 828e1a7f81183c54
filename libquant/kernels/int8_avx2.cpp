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

#include <algorithm>
#include <cmath>

namespace qt::kernels {
namespace {

// Register block: kRows output rows × kTokens tokens of int32 accumulators (8 + 2·2 weight
// registers + operands fit the 16 ymm registers without spills).
constexpr int kRows = 2, kTokens = 3;
// Tokens per pass over the weights: their codes (kBlock·k bytes) stay in L2 while every row pair
// streams past them, instead of the whole batch's activations being re-read from L3 per row pair.
constexpr int64_t kBlock = 64;

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
          int64_t t0, int64_t t1, float* y, int64_t n0) {
  for (; t0 + kTokens <= t1; t0 += kTokens) block<R, kTokens>(q, s, n, k, gl, a, sx, y, n0, t0);
  for (; t0 < t1; ++t0) block<R, 1>(q, s, n, k, gl, a, sx, y, n0, t0);
}

// quantize_activations_int8 of one row, 8 lanes: the same amax, s, 1/s and rint(x·(1/s)).
__attribute__((target("avx2"))) void quantize_row(const float* x, int64_t k, int8_t* q, float* scale) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vmax = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  float lanes[8];
  _mm256_storeu_ps(lanes, vmax);
  float amax = 0.0f;
  for (float v : lanes) amax = std::max(amax, v);
  for (; i < k; ++i) amax = std::max(amax, std::abs(x[i]));
  float s = amax / 127.0f;
  if (s == 0.0f) s = 1.0f;
  const float inv = 1.0f / s;
  const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
  i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 v =
        _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    const __m128i v32lo = _mm256_castsi256_si128(_mm256_cvtps_epi32(v));
    const __m128i v32hi = _mm256_extracti128_si256(_mm256_cvtps_epi32(v), 1);
    const __m128i v16 = _mm_packs_epi32(v32lo, v32hi);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(v16, v16));
  }
  for (; i < k; ++i) q[i] = int8_t(std::min(std::max(std::rint(x[i] * inv), -128.0f), 127.0f));
  *scale = s;
}

}  // namespace

void quantize_activations_int8_avx2(const float* x, int64_t m, int64_t k, int8_t* q, float* scales) {
#pragma omp parallel for schedule(static) if (m * k > (1 << 15))
  for (int64_t t = 0; t < m; ++t) quantize_row(x + t * k, k, q + t * k, scales + t);
}

void gemm_s8s8_avx2(const int8_t* q, const float* s, int64_t n, int64_t k, int64_t gl, const int8_t* a, const float* sx,
                    int64_t m, float* y) {
  const int64_t pairs = (n + kRows - 1) / kRows;
  // Static schedule: a thread keeps the same rows in every token block (its weights stay cached);
  // blocks write disjoint outputs, so no barrier between them.
#pragma omp parallel if (m * n * k > (1 << 17))
  for (int64_t t0 = 0; t0 < m; t0 += kBlock) {
    const int64_t t1 = std::min(m, t0 + kBlock);
#pragma omp for schedule(static) nowait
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t n0 = kRows * p;
      if (n0 + kRows <= n) {
        rows<kRows>(q, s, n, k, gl, a, sx, t0, t1, y, n0);
      } else {
        for (int64_t r = n0; r < n; ++r) rows<1>(q, s, n, k, gl, a, sx, t0, t1, y, r);
      }
    }
  }
}

}  // namespace qt::kernels
