// affine_gemv.h's int16 GEMV at two widths (AVX2 ymm, AVX-512 VNNI zmm) and the nf4/fp4 table
// GEMV (AVX2, AVX-512). Four rows at a time share each load of the token and give four independent chains;
// each group's sum is scaled into a per-row vector total once.
#include "libquant/kernels/affine_gemv.h"

#include <immintrin.h>

#include <algorithm>

#include "libquant/cpu_features.h"
#include "libquant/kernels/affine_i16_detail.h"
#include "libquant/kernels/hsum_avx2.h"

namespace qt::kernels {
namespace {

constexpr int kRows = 4;

#define QT_AVX2 __attribute__((target("avx2,fma")))
#define QT_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))

// Σ_g b_g·X_g + s_g·C_g of one row (C_g = c·R_g, affine_gemv.h), in 8 independent partial sums
// (one chain of k/g dependent adds would cost as much as the row's codes on the long shapes).
inline float bias_term(const float* b, const float* s, const float* xsum, const float* xres, int64_t groups) {
  float p[8] = {};
  int64_t i = 0;
  for (; i + 8 <= groups; i += 8)
    for (int l = 0; l < 8; ++l) p[l] += b[i + l] * xsum[i + l] + s[i + l] * xres[i + l];
  for (; i < groups; ++i) p[0] += b[i] * xsum[i] + s[i] * xres[i];
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

// One row block of the int16 GEMV at W int16 lanes (16: AVX2 ymm, 32: AVX-512 zmm). A chunk of 2W
// 4-bit codes is W bytes, zero-extended to W int16 lanes: `& 15` gives the even elements, `>> 4` the
// odd ones, each met by the token reordered the same way (prepare). A chunk of W 8-bit codes is W
// bytes in order. VPMADDWD (or VPDPWSSD) sums adjacent lane pairs of code × token into int32, exact
// within a group (g·255·32767 < 2^31 for g ≤ 256); each group's int32 sums are scaled once by
// s_g·d_g into a float total per row.
template <int kBits, int R>
QT_AVX2 void rows_avx2(const uint8_t* codes, const float* scales, const float* biases, int64_t k, int64_t g,
                       const int16_t* xq, const float* xd, const float* xsum, const float* xres, int64_t r0,
                       const float* bias, float* y, bool prefetch) {
  constexpr int W = 16;
  const int64_t row_bytes = k * kBits / 8, groups = k / g;
  const uint8_t* row[R];
  __m256 tot[R];
  for (int r = 0; r < R; ++r) {
    row[r] = codes + (r0 + r) * row_bytes;
    tot[r] = _mm256_setzero_ps();
  }
  const __m256i low4 = _mm256_set1_epi16(15);
  for (int64_t gi = 0; gi < groups; ++gi) {
    // The next R rows' group (when the caller has R more rows): a thread's rows are short streams
    // (SmolLM2's 576 codes, Cider's K = 2560) that the hardware prefetcher barely ramps up on; this
    // took 4-bit codes from ~50% to ~70% of the memory bandwidth here.
    if (prefetch)
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(row[r] + R * row_bytes + gi * g * kBits / 8), _MM_HINT_T0);
    __m256i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
    for (int64_t j = gi * g; j < (gi + 1) * g; j += 2 * W) {
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + j));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + j + W));
      for (int r = 0; r < R; ++r) {
        if constexpr (kBits == 4) {
          const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r] + j / 2)));
          acc[r] = _mm256_add_epi32(acc[r], _mm256_add_epi32(_mm256_madd_epi16(_mm256_and_si256(v, low4), x0),
                                                             _mm256_madd_epi16(_mm256_srli_epi16(v, 4), x1)));
        } else {
          const __m256i v0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r] + j)));
          const __m256i v1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r] + j + W)));
          acc[r] = _mm256_add_epi32(acc[r], _mm256_add_epi32(_mm256_madd_epi16(v0, x0), _mm256_madd_epi16(v1, x1)));
        }
      }
    }
    for (int r = 0; r < R; ++r)
      tot[r] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r]), _mm256_set1_ps(scales[(r0 + r) * groups + gi] * xd[gi]), tot[r]);
  }
  for (int r = 0; r < R; ++r)
    y[r0 + r] = hsum8(tot[r]) + bias_term(biases + (r0 + r) * groups, scales + (r0 + r) * groups, xsum, xres, groups) +
                (bias ? bias[r0 + r] : 0.0f);
}

// The same at 32 lanes, one VPDPWSSD the multiply and the add (AVX-512 without VNNI runs the AVX2 rows).
template <int kBits, int R>
QT_AVX512_VNNI void rows_avx512(const uint8_t* codes, const float* scales, const float* biases, int64_t k, int64_t g,
                                const int16_t* xq, const float* xd, const float* xsum, const float* xres, int64_t r0,
                                const float* bias, float* y, bool prefetch) {
  constexpr int W = 32;
  const int64_t row_bytes = k * kBits / 8, groups = k / g;
  const uint8_t* row[R];
  __m512 tot[R];
  for (int r = 0; r < R; ++r) {
    row[r] = codes + (r0 + r) * row_bytes;
    tot[r] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi16(15);
  for (int64_t gi = 0; gi < groups; ++gi) {
    if (prefetch)
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(row[r] + R * row_bytes + gi * g * kBits / 8), _MM_HINT_T0);
    __m512i acc[R], acc2[R];  // two chains per row
    for (int r = 0; r < R; ++r) acc[r] = acc2[r] = _mm512_setzero_si512();
    for (int64_t j = gi * g; j < (gi + 1) * g; j += 2 * W) {
      const __m512i x0 = _mm512_loadu_si512(xq + j), x1 = _mm512_loadu_si512(xq + j + W);
      for (int r = 0; r < R; ++r) {
        if constexpr (kBits == 4) {
          const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[r] + j / 2)));
          acc[r] = _mm512_dpwssd_epi32(acc[r], _mm512_and_si512(v, low4), x0);
          acc2[r] = _mm512_dpwssd_epi32(acc2[r], _mm512_srli_epi16(v, 4), x1);
        } else {
          acc[r] = _mm512_dpwssd_epi32(
              acc[r], _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[r] + j))), x0);
          acc2[r] = _mm512_dpwssd_epi32(
              acc2[r], _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[r] + j + W))), x1);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      tot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc[r], acc2[r])),
                               _mm512_set1_ps(scales[(r0 + r) * groups + gi] * xd[gi]), tot[r]);
  }
  for (int r = 0; r < R; ++r)
    y[r0 + r] = _mm512_reduce_add_ps(tot[r]) +
                bias_term(biases + (r0 + r) * groups, scales + (r0 + r) * groups, xsum, xres, groups) +
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

// The same at 16 fp32 lanes: one VPERMPS looks up all 16 entries (the low 4 bits of each lane),
// so a chunk of 32 codes (16 bytes) costs a widen, a shift, two permutes and two FMAs. The token
// is reordered in chunks of 32 (16 evens, 16 odds). The next R rows' block is prefetched as in
// rows_avx2.
#define QT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
template <int R>
QT_AVX512 void table_rows_avx512(const uint8_t* codes, const float* absmax, const float* table, int64_t k, int64_t bs,
                                 const float* x, int64_t r0, const float* bias, float* y, bool prefetch) {
  const int64_t row_bytes = k / 2, blocks = k / bs;
  const __m512 tab = _mm512_loadu_ps(table);
  const uint8_t* row[R];
  __m512 tot[R];
  for (int r = 0; r < R; ++r) {
    row[r] = codes + (r0 + r) * row_bytes;
    tot[r] = _mm512_setzero_ps();
  }
  for (int64_t bi = 0; bi < blocks; ++bi) {
    if (prefetch)
      for (int r = 0; r < R; ++r)
        for (int64_t o = 0; o < bs / 2; o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(row[r] + R * row_bytes + bi * bs / 2 + o), _MM_HINT_T0);
    __m512 acc[R], acc2[R];
    for (int r = 0; r < R; ++r) acc[r] = acc2[r] = _mm512_setzero_ps();
    for (int64_t j = bi * bs; j < (bi + 1) * bs; j += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + j), x1 = _mm512_loadu_ps(x + j + 16);
      for (int r = 0; r < R; ++r) {  // even elements in the high nibbles
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r] + j / 2)));
        acc[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), tab), x0, acc[r]);
        acc2[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(v, tab), x1, acc2[r]);
      }
    }
    for (int r = 0; r < R; ++r)
      tot[r] = _mm512_fmadd_ps(_mm512_add_ps(acc[r], acc2[r]), _mm512_set1_ps(absmax[(r0 + r) * blocks + bi]), tot[r]);
  }
  for (int r = 0; r < R; ++r) y[r0 + r] = _mm512_reduce_add_ps(tot[r]) + (bias ? bias[r0 + r] : 0.0f);
}

template <int kBits>
void run_rows(const uint8_t* codes, const float* scales, const float* biases, int64_t k, int64_t g,
              const AffineGemvInput& in, int64_t r0, int64_t r1, const float* bias, float* y) {
  const int16_t* xq = in.xq.data();
  const float *xd = in.xscale.data(), *xsum = in.xsum.data(), *xres = in.xres.data();
  int64_t r = r0;
  if (in.lanes == 32) {  // the width the token was reordered for
    for (; r + kRows <= r1; r += kRows)
      rows_avx512<kBits, kRows>(codes, scales, biases, k, g, xq, xd, xsum, xres, r, bias, y, r + 2 * kRows <= r1);
    for (; r < r1; ++r) rows_avx512<kBits, 1>(codes, scales, biases, k, g, xq, xd, xsum, xres, r, bias, y, false);
    return;
  }
  for (; r + kRows <= r1; r += kRows)
    rows_avx2<kBits, kRows>(codes, scales, biases, k, g, xq, xd, xsum, xres, r, bias, y, r + 2 * kRows <= r1);
  for (; r < r1; ++r) rows_avx2<kBits, 1>(codes, scales, biases, k, g, xq, xd, xsum, xres, r, bias, y, false);
}

// int16 lanes of the affine kernel for group size g: 32 with AVX-512 VNNI when g holds whole
// 64-code chunks, else 16 (AVX2); 0: no kernel.
int int16_lanes(int64_t g) {
  const KernelLevel lvl = kernel_level();
  if (lvl >= KernelLevel::AVX512 && cpu_features().avx512_vnni && g % 64 == 0) return 32;
  return lvl >= KernelLevel::AVX2 ? 16 : 0;
}

}  // namespace

bool affine_gemv_supports(int bits, int64_t k, int64_t g) {
  const int lanes = int16_lanes(g);
  return lanes > 0 && (bits == 4 || bits == 8) && g > 0 && g <= 128 && g % (2 * lanes) == 0 && k % g == 0;
}

namespace {
// The token in the kernel's order: 4-bit, each chunk of 2L values evens then odds (L = lanes).
template <typename T>
void reorder(int bits, int lanes, const T* x, int64_t k, T* out) {
  if (bits != 4) {
    std::copy(x, x + k, out);
    return;
  }
  for (int64_t c = 0; c < k; c += 2 * lanes)
    for (int64_t i = 0; i < lanes; ++i) {
      out[c + i] = x[c + 2 * i];
      out[c + lanes + i] = x[c + 2 * i + 1];
    }
}

}  // namespace

void affine_gemv_prepare(int bits, const float* x, int64_t k, int64_t g, AffineGemvInput* in) {
  in->lanes = int16_lanes(g);
  const int64_t groups = k / g;
  in->xq.resize(size_t(k));
  in->xscale.resize(size_t(groups));
  in->xsum.resize(size_t(groups));
  in->xres.resize(size_t(groups));
  // The GEMM's rounding (i16::Isa::round_token, affine_i16_detail.h): one implementation for both,
  // and vectorised — it runs on the calling thread before every call's parallel rows.
  thread_local std::vector<int16_t> rounded;
  rounded.resize(size_t(k));
  const i16::Isa& isa = in->lanes == 32 ? i16::isa_vnni() : i16::isa_avx2();
  isa.round_token(x, k, g, rounded.data(), in->xscale.data(), in->xsum.data());
  for (int64_t gi = 0; gi < groups; ++gi) {
    int32_t qsum = 0;  // |Σx̃| ≤ 256·32767 < 2^31
    for (int64_t j = gi * g; j < (gi + 1) * g; ++j) qsum += rounded[size_t(j)];
    // C_g = c·(X_g − d_g·Σx̃): the centre's share of the rounding error, from the exact sum.
    in->xres[size_t(gi)] = float(1 << (bits - 1)) * (in->xsum[size_t(gi)] - in->xscale[size_t(gi)] * float(qsum));
  }
  reorder(bits, in->lanes, rounded.data(), k, in->xq.data());
}

bool bnb4_gemv_supports(int64_t k, int64_t block) {
  return kernel_level() >= KernelLevel::AVX2 && block > 0 && block % 16 == 0 && k % block == 0;
}

void bnb4_gemv_prepare(const float* x, int64_t k, int64_t block, AffineGemvInput* in) {
  // fp32 lanes of the table kernel: 16 at the AVX-512 level where blocks hold whole 32-code chunks
  // (prepare decides; the rows read in.lanes).
  in->lanes = kernel_level() >= KernelLevel::AVX512 && block % 32 == 0 ? 16 : 8;
  in->x.resize(size_t(k));
  reorder(4, in->lanes, x, k, in->x.data());
}

void bnb4_gemv_rows(const uint8_t* codes, const float* absmax, const float* table, int64_t k, int64_t block,
                    const AffineGemvInput& in, int64_t r0, int64_t r1, const float* bias, float* y) {
  int64_t r = r0;
  if (in.lanes == 16) {
    for (; r + kRows <= r1; r += kRows)
      table_rows_avx512<kRows>(codes, absmax, table, k, block, in.x.data(), r, bias, y, r + 2 * kRows <= r1);
    for (; r < r1; ++r) table_rows_avx512<1>(codes, absmax, table, k, block, in.x.data(), r, bias, y, false);
    return;
  }
  for (; r + kRows <= r1; r += kRows) table_rows_avx2<kRows>(codes, absmax, table, k, block, in.x.data(), r, bias, y);
  for (; r < r1; ++r) table_rows_avx2<1>(codes, absmax, table, k, block, in.x.data(), r, bias, y);
}

void affine_gemv_rows(int bits, const uint8_t* codes, const float* scales, const float* biases, int64_t k, int64_t g,
                      const AffineGemvInput& in, int64_t r0, int64_t r1, const float* bias, float* y) {
  if (bits == 4) return run_rows<4>(codes, scales, biases, k, g, in, r0, r1, bias, y);
  run_rows<8>(codes, scales, biases, k, g, in, r0, r1, bias, y);
}

}  // namespace qt::kernels
