// affine8_gemv.h's kernel. A chunk is 32 codes (32 bytes, elements 0..31). q·s in two fp32 vectors
// (lanes = elements 0–15, 16–31), VCVTNE2PS2BF16 puts bf16(element j) in word j; a dword lane i's
// low word (shifted up) is element 2i, its high word (masked) element 2i+1. After + b the second
// VCVTNE2PS2BF16 takes the even elements into words 0–15 and the odd ones into 16–31, so the final
// split gives lane i: w0 = element 4i (i < 8) or 4i − 31, w1 = element 4i + 2 or 4i − 29 — the
// prepared token holds, at 32c + i and 32c + 16 + i, the elements those lanes meet.
#include "libquant/kernels/affine8_gemv.h"

#include <immintrin.h>

#include <algorithm>

#include "libquant/cpu_features.h"
#include "libquant/kernels/affine_weights_avx512.h"
#include "libquant/kernels/few_token_rows.h"

namespace qt::kernels {
namespace {

// GCC 12 reads the intrinsics' undefined-vector idiom (_mm512_cvtepi32_ps, _mm512_cvtne2ps_pbh) as
// an uninitialized use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define QT_AFFINE8 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))

constexpr size_t kAhead = 2048;  // bytes of codes asked for ahead (as lut4_gemv.cpp)

// The element lane i of the first (second) weight vector of a chunk holds.
constexpr int first_element(int i) { return i < 8 ? 4 * i : 4 * i - 31; }
constexpr int second_element(int i) { return i < 8 ? 4 * i + 2 : 4 * i - 29; }

// bf16 pairs (word 2i low, 2i + 1 high of dword i) as fp32: the even words, the odd words.
QT_AFFINE8 inline __m512 even_words(__m512i z) { return _mm512_castsi512_ps(_mm512_slli_epi32(z, 16)); }
QT_AFFINE8 inline __m512 odd_words(__m512i z) {
  return _mm512_castsi512_ps(_mm512_and_si512(z, _mm512_set1_epi32(int(0xffff0000u))));
}
QT_AFFINE8 inline __m512i to_bf16_pairs(__m512 high, __m512 low) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low));
}

// Row r against kM prepared tokens: two accumulators a token, summed at the end.
template <int kM>
QT_AFFINE8 void row_dot(const uint8_t* row, int64_t k, int64_t g, int64_t first_group, const AffineGroupScales& scales,
                        const float* xp, float* out) {
  __m512 acc[kM][2];
  for (int t = 0; t < kM; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  for (int64_t j0 = 0; j0 < k; j0 += g) {
    float s, b;
    scales(first_group + j0 / g, &s, &b);
    const __m512 vs = _mm512_set1_ps(s), vb = _mm512_set1_ps(b);
    for (int64_t j = j0; j < j0 + g; j += 32) {
      const uint8_t* bytes = row + j;
      _mm_prefetch(reinterpret_cast<const char*>(bytes + kAhead), _MM_HINT_T0);
      const __m512 lo =
          _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes))));
      const __m512 hi =
          _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 16))));
      const __m512i qs = to_bf16_pairs(_mm512_mul_ps(hi, vs), _mm512_mul_ps(lo, vs));  // bf16(q·s), word j = element j
      const __m512i w =
          to_bf16_pairs(_mm512_add_ps(odd_words(qs), vb), _mm512_add_ps(even_words(qs), vb));  // bf16(bf16(q·s) + b)
      const __m512 w0 = even_words(w), w1 = odd_words(w);
      for (int t = 0; t < kM; ++t) {
        acc[t][0] = _mm512_fmadd_ps(_mm512_loadu_ps(xp + t * k + j), w0, acc[t][0]);
        acc[t][1] = _mm512_fmadd_ps(_mm512_loadu_ps(xp + t * k + j + 16), w1, acc[t][1]);
      }
    }
  }
  for (int t = 0; t < kM; ++t) out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
}

void rows(const uint8_t* codes, const AffineGroupScales& scales, int64_t n, int64_t k, int64_t g, const float* xp,
          int64_t m, const float* bias, float* y) {
  const int64_t groups = k / g;
  few_token_rows(n, k, m, bias, y, [&](auto tokens, int64_t r, float* out) {
    row_dot<decltype(tokens)::value>(codes + size_t(r) * size_t(k), k, g, r * groups, scales, xp, out);
  });
}

#pragma GCC diagnostic pop

}  // namespace

bool affine8_gemv_supports(int64_t k, int64_t g) {
  return kernel_level() >= KernelLevel::AVX512 && cpu_features().avx512_bf16 && g > 0 && g % 32 == 0 && k % g == 0;
}

void affine8_prepare(const float* x, int64_t m, int64_t k, float* out) {
  for (int64_t t = 0; t < m; ++t)
    for (int64_t c = 0; c < k; c += 32)
      for (int i = 0; i < 16; ++i) {
        out[t * k + c + i] = x[t * k + c + first_element(i)];
        out[t * k + c + 16 + i] = x[t * k + c + second_element(i)];
      }
}

void affine8_rows(const uint8_t* codes, const AffineGroupScales& scales, int64_t n, int64_t k, int64_t g,
                  const float* xp, int64_t m, const float* bias, float* y) {
  for (int64_t t0 = 0; t0 < m; t0 += kFewTokens)
    rows(codes, scales, n, k, g, xp + t0 * k, std::min<int64_t>(kFewTokens, m - t0), bias, y + t0 * n);
}

}  // namespace qt::kernels
