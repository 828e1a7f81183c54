// lut4_gemv.h's kernel. A chunk is 64 codes (32 bytes, dwords d0..d7): nibble n of dword i is
// element 8i + n (MLX: element 2i in the low nibble of byte i) or 8i + (n ^ 1) (bitsandbytes: in
// the high nibble). Step s (0..3) of a chunk looks up lanes 0–7 at nibble s and lanes 8–15 at
// nibble s + 4 of d0..d7, so the prepared token holds, at 64c + 16s + L, the element those lanes
// meet.
#include "libquant/kernels/lut4_gemv.h"

#include <immintrin.h>

#include <algorithm>

#include "libquant/cpu_features.h"
#include "libquant/kernels/affine_weights_avx512.h"
#include "libquant/kernels/few_token_rows.h"

namespace qt::kernels {
namespace {

// GCC 12 reads the intrinsics' undefined-vector idiom as an uninitialized use once inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define QT_LUT4 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

constexpr size_t kAhead = 2048;  // bytes of codes asked for ahead (as ggml_interleaved.cpp)

// The 16 weights of a group.
struct AffineTable {
  AffineGroupScales scales;
  bool bf16;
  QT_LUT4 __m512 operator()(int64_t gi) const {
    const __m512 iota = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    float s, b;
    scales(gi, &s, &b);
    return affine_of(iota, _mm512_set1_ps(s), _mm512_set1_ps(b), bf16);
  }
};

struct BnbTable {
  const float* absmax;
  const float* table;
  bool bf16;
  QT_LUT4 __m512 operator()(int64_t gi) const {
    const __m512 w = _mm512_mul_ps(_mm512_loadu_ps(table), _mm512_set1_ps(absmax[gi]));
    return bf16 ? round_bf16_16(w) : w;
  }
};

// Row r against kM prepared tokens: four accumulators a token (one a step), summed at the end.
template <int kM, class Table>
QT_LUT4 void row_dot(const uint8_t* row, int64_t k, int64_t g, int64_t first_group, const Table& table, const float* xp,
                     float* out) {
  // Lanes 8–15 shifted by 16 once a chunk: then step s is a shift by 4s of every lane.
  const __m512i half_shift = _mm512_set_epi32(16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 acc[kM][4];
  for (int t = 0; t < kM; ++t)
    for (int s = 0; s < 4; ++s) acc[t][s] = _mm512_setzero_ps();
  for (int64_t c0 = 0; c0 < k / 64; c0 += g / 64) {
    const __m512 tab = table(first_group + c0 * 64 / g);
    for (int64_t c = c0; c < c0 + g / 64; ++c) {
      const uint8_t* bytes = row + 32 * c;
      _mm_prefetch(reinterpret_cast<const char*>(bytes + kAhead), _MM_HINT_T0);
      const __m512i v = _mm512_srlv_epi32(
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes))), half_shift);
      const __m512 w[4] = {_mm512_permutexvar_ps(v, tab), _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), tab),
                           _mm512_permutexvar_ps(_mm512_srli_epi32(v, 8), tab),
                           _mm512_permutexvar_ps(_mm512_srli_epi32(v, 12), tab)};
      for (int t = 0; t < kM; ++t)
        for (int s = 0; s < 4; ++s)
          acc[t][s] = _mm512_fmadd_ps(_mm512_loadu_ps(xp + t * k + 64 * c + 16 * s), w[s], acc[t][s]);
    }
  }
  for (int t = 0; t < kM; ++t)
    out[t] =
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]), _mm512_add_ps(acc[t][2], acc[t][3])));
}

template <class Table>
void rows(const uint8_t* codes, const Table& table, int64_t n, int64_t k, int64_t g, const float* xp, int64_t m,
          const float* bias, float* y) {
  const int64_t groups = k / g;
  few_token_rows(n, k, m, bias, y, [&](auto tokens, int64_t r, float* out) {
    row_dot<decltype(tokens)::value>(codes + size_t(r) * size_t(k / 2), k, g, r * groups, table, xp, out);
  });
}

#pragma GCC diagnostic pop

}  // namespace

bool lut4_gemv_supports(int64_t k, int64_t g) {
  return kernel_level() >= KernelLevel::AVX512 && g > 0 && g % 64 == 0 && k % g == 0;
}

void lut4_prepare(const float* x, int64_t m, int64_t k, bool high_first, float* out) {
  const int flip = high_first ? 1 : 0;
  for (int64_t t = 0; t < m; ++t)
    for (int64_t c = 0; c < k; c += 64)
      for (int s = 0; s < 4; ++s)
        for (int lane = 0; lane < 16; ++lane) {
          const int nibble = s + 4 * (lane >> 3);
          out[t * k + c + 16 * s + lane] = x[t * k + c + 8 * (lane & 7) + (nibble ^ flip)];
        }
}

void affine4_lut_rows(const uint8_t* codes, const AffineGroupScales& scales, bool bf16, int64_t n, int64_t k, int64_t g,
                      const float* xp, int64_t m, const float* bias, float* y) {
  const AffineTable table{scales, bf16};
  for (int64_t t0 = 0; t0 < m; t0 += kFewTokens)
    rows(codes, table, n, k, g, xp + t0 * k, std::min<int64_t>(kFewTokens, m - t0), bias, y + t0 * n);
}

void bnb4_lut_rows(const uint8_t* codes, const float* absmax, const float* table, bool bf16, int64_t n, int64_t k,
                   int64_t bs, const float* xp, int64_t m, const float* bias, float* y) {
  const BnbTable tab{absmax, table, bf16};
  for (int64_t t0 = 0; t0 < m; t0 += kFewTokens)
    rows(codes, tab, n, k, bs, xp + t0 * k, std::min<int64_t>(kFewTokens, m - t0), bias, y + t0 * n);
}

}  // namespace qt::kernels
