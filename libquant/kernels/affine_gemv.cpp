// affine_gemv.h at two widths. The 4-bit codes of a chunk of 2L weights are L bytes (element 2i in
// the low nibble of byte i, MLX's order): zero-extended to L int32 lanes, `& 15` gives the even
// elements and `>> 4` the odd ones, which meet the token reordered the same way (prepare), so no
// shuffle sits in the loop. Four rows at a time share each load of the token and give the FMAs four
// independent chains; each group's code sum is scaled into a per-row vector total with one FMA.
#include "libquant/kernels/affine_gemv.h"

#include <immintrin.h>

#include "libquant/cpu_features.h"
#include "libquant/kernels/hsum_avx2.h"

namespace qt::kernels {
namespace {

constexpr int kRows = 4;

#define QT_AVX2 __attribute__((target("avx2,fma")))
#define QT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

// Σ_g b_g·X_g of one row, in 8 independent partial sums (one chain of k/g dependent adds would
// cost as much as the row's codes on the long shapes).
inline float bias_term(const float* b, const float* xsum, int64_t groups) {
  float p[8] = {};
  int64_t i = 0;
  for (; i + 8 <= groups; i += 8)
    for (int l = 0; l < 8; ++l) p[l] += b[i + l] * xsum[i + l];
  for (; i < groups; ++i) p[0] += b[i] * xsum[i];
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

// 4-bit codes only (affine_gemv_supports).
template <int R>
QT_AVX2 void rows_avx2(const uint8_t* codes, const float* scales, const float* biases, int64_t k, int64_t g,
                       const float* x, const float* xsum, int64_t r0, const float* bias, float* y) {
  const int64_t row_bytes = k / 2, groups = k / g;
  const uint8_t* row[R];
  __m256 tot[R];
  for (int r = 0; r < R; ++r) {
    row[r] = codes + (r0 + r) * row_bytes;
    tot[r] = _mm256_setzero_ps();
  }
  const __m256i low4 = _mm256_set1_epi32(15);
  for (int64_t gi = 0; gi < groups; ++gi) {
    __m256 acc[R], acc2[R];  // two chains per row: eight FMAs in flight
    for (int r = 0; r < R; ++r) acc[r] = acc2[r] = _mm256_setzero_ps();
    for (int64_t j = gi * g; j < (gi + 1) * g; j += 16) {
      const __m256 x0 = _mm256_loadu_ps(x + j), x1 = _mm256_loadu_ps(x + j + 8);
      for (int r = 0; r < R; ++r) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row[r] + j / 2)));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, low4)), x0, acc[r]);
        acc2[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), x1, acc2[r]);
      }
    }
    for (int r = 0; r < R; ++r)
      tot[r] = _mm256_fmadd_ps(_mm256_add_ps(acc[r], acc2[r]), _mm256_set1_ps(scales[(r0 + r) * groups + gi]), tot[r]);
  }
  for (int r = 0; r < R; ++r)
    y[r0 + r] = hsum8(tot[r]) + bias_term(biases + (r0 + r) * groups, xsum, groups) + (bias ? bias[r0 + r] : 0.0f);
}

template <int kBits, int R>
QT_AVX512 void rows_avx512(const uint8_t* codes, const float* scales, const float* biases, int64_t k, int64_t g,
                           const float* x, const float* xsum, int64_t r0, const float* bias, float* y) {
  const int64_t row_bytes = k * kBits / 8, groups = k / g;
  const uint8_t* row[R];
  __m512 tot[R];
  for (int r = 0; r < R; ++r) {
    row[r] = codes + (r0 + r) * row_bytes;
    tot[r] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi32(15);
  for (int64_t gi = 0; gi < groups; ++gi) {
    __m512 acc[R], acc2[R];
    for (int r = 0; r < R; ++r) acc[r] = acc2[r] = _mm512_setzero_ps();
    for (int64_t j = gi * g; j < (gi + 1) * g; j += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + j), x1 = _mm512_loadu_ps(x + j + 16);
      for (int r = 0; r < R; ++r) {
        if constexpr (kBits == 4) {
          const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r] + j / 2)));
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, low4)), x0, acc[r]);
          acc2[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), x1, acc2[r]);
        } else {
          const __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r] + j)));
          const __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r] + j + 16)));
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v0), x0, acc[r]);
          acc2[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v1), x1, acc2[r]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      tot[r] = _mm512_fmadd_ps(_mm512_add_ps(acc[r], acc2[r]), _mm512_set1_ps(scales[(r0 + r) * groups + gi]), tot[r]);
  }
  for (int r = 0; r < R; ++r)
    y[r0 + r] = _mm512_reduce_add_ps(tot[r]) + bias_term(biases + (r0 + r) * groups, xsum, groups) +
                (bias ? bias[r0 + r] : 0.0f);
}

// 16 table entries at the low 4 bits of each lane of idx (higher bits ignored).
QT_AVX2 inline __m256 lookup16(__m256i idx, __m256 lo_tab, __m256 hi_tab) {
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo_tab, idx), _mm256_permutevar8x32_ps(hi_tab, idx),
                          _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

template <int R>
QT_AVX2 void table_rows_avx2(const uint8_t* codes, const float* absmax, const float* table, int64_t k, int64_t bs,
                             const float* x, int64_t r0, const float* bias, float* y) {
  const int64_t row_bytes = k / 2, blocks = k / bs;
  const __m256 lo_tab = _mm256_loadu_ps(table), hi_tab = _mm256_loadu_ps(table + 8);
  const uint8_t* row[R];
  __m256 tot[R];
  for (int r = 0; r < R; ++r) {
    row[r] = codes + (r0 + r) * row_bytes;
    tot[r] = _mm256_setzero_ps();
  }
  for (int64_t bi = 0; bi < blocks; ++bi) {
    __m256 acc[R], acc2[R];
    for (int r = 0; r < R; ++r) acc[r] = acc2[r] = _mm256_setzero_ps();
    for (int64_t j = bi * bs; j < (bi + 1) * bs; j += 16) {
      const __m256 x0 = _mm256_loadu_ps(x + j), x1 = _mm256_loadu_ps(x + j + 8);
      for (int r = 0; r < R; ++r) {  // even elements in the high nibbles
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row[r] + j / 2)));
        acc[r] = _mm256_fmadd_ps(lookup16(_mm256_srli_epi32(v, 4), lo_tab, hi_tab), x0, acc[r]);
        acc2[r] = _mm256_fmadd_ps(lookup16(v, lo_tab, hi_tab), x1, acc2[r]);
      }
    }
    for (int r = 0; r < R; ++r)
      tot[r] = _mm256_fmadd_ps(_mm256_add_ps(acc[r], acc2[r]), _mm256_set1_ps(absmax[(r0 + r) * blocks + bi]), tot[r]);
  }
  for (int r = 0; r < R; ++r) y[r0 + r] = hsum8(tot[r]) + (bias ? bias[r0 + r] : 0.0f);
}

template <int kBits>
void run_rows(const uint8_t* codes, const float* scales, const float* biases, int64_t k, int64_t g, const float* x,
              const float* xsum, int lanes, int64_t r0, int64_t r1, const float* bias, float* y) {
  int64_t r = r0;
  if (lanes == 16) {  // the width the token was reordered for
    for (; r + kRows <= r1; r += kRows) rows_avx512<kBits, kRows>(codes, scales, biases, k, g, x, xsum, r, bias, y);
    for (; r < r1; ++r) rows_avx512<kBits, 1>(codes, scales, biases, k, g, x, xsum, r, bias, y);
    return;
  }
  if constexpr (kBits == 4) {
    for (; r + kRows <= r1; r += kRows) rows_avx2<kRows>(codes, scales, biases, k, g, x, xsum, r, bias, y);
    for (; r < r1; ++r) rows_avx2<1>(codes, scales, biases, k, g, x, xsum, r, bias, y);
  }
}

}  // namespace

int affine_gemv_lanes() {
  const KernelLevel lvl = kernel_level();
  return lvl == KernelLevel::AVX512 ? 16 : lvl == KernelLevel::AVX2 ? 8 : 0;
}

// 8-bit codes only at 16 lanes: on AVX2 the caller's fused per-weight decode measured faster than
// this GEMV (SmolLM2's output head, 1 token: 1.6 vs 2.2 ms); 4-bit codes and nf4/fp4 measured
// 1.1-2.6x faster here for 1-3 tokens.
bool affine_gemv_supports(int bits, int64_t k, int64_t g) {
  const int lanes = affine_gemv_lanes();
  return lanes > 0 && (bits == 4 || (bits == 8 && lanes == 16)) && g > 0 && g % (2 * lanes) == 0 && k % g == 0;
}

namespace {
void prepare(int bits, int lanes, const float* x, int64_t k, int64_t g, AffineGemvInput* in) {
  const int64_t chunk = 2 * lanes;
  in->lanes = lanes;
  in->x.resize(size_t(k));
  if (bits == 4) {
    for (int64_t c = 0; c < k; c += chunk)
      for (int64_t i = 0; i < lanes; ++i) {
        in->x[size_t(c + i)] = x[c + 2 * i];
        in->x[size_t(c + lanes + i)] = x[c + 2 * i + 1];
      }
  } else {
    in->x.assign(x, x + k);
  }
  in->xsum.assign(size_t(k / g), 0.0f);
  for (int64_t j = 0; j < k; ++j) in->xsum[size_t(j / g)] += x[j];
}
}  // namespace

void affine_gemv_prepare(int bits, const float* x, int64_t k, int64_t g, AffineGemvInput* in) {
  prepare(bits, affine_gemv_lanes(), x, k, g, in);
}

bool bnb4_gemv_supports(int64_t k, int64_t block) {
  return kernel_level() >= KernelLevel::AVX2 && block > 0 && block % 16 == 0 && k % block == 0;
}

void bnb4_gemv_prepare(const float* x, int64_t k, int64_t block, AffineGemvInput* in) {
  prepare(4, 8, x, k, block, in);
}

void bnb4_gemv_rows(const uint8_t* codes, const float* absmax, const float* table, int64_t k, int64_t block,
                    const AffineGemvInput& in, int64_t r0, int64_t r1, const float* bias, float* y) {
  int64_t r = r0;
  for (; r + kRows <= r1; r += kRows) table_rows_avx2<kRows>(codes, absmax, table, k, block, in.x.data(), r, bias, y);
  for (; r < r1; ++r) table_rows_avx2<1>(codes, absmax, table, k, block, in.x.data(), r, bias, y);
}

void affine_gemv_rows(int bits, const uint8_t* codes, const float* scales, const float* biases, int64_t k, int64_t g,
                      const AffineGemvInput& in, int64_t r0, int64_t r1, const float* bias, float* y) {
  if (bits == 4) return run_rows<4>(codes, scales, biases, k, g, in.x.data(), in.xsum.data(), in.lanes, r0, r1, bias, y);
  run_rows<8>(codes, scales, biases, k, g, in.x.data(), in.xsum.data(), in.lanes, r0, r1, bias, y);
}

}  // namespace qt::kernels
