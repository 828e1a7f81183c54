// affine_i16_vnni.h. The tile is int8_vnni.cpp's, with int16 pairs in place of int8 quads: R token
// rows × NP panels of 16 output rows, R·NP int32 accumulators over one group's k-pairs (each pair
// of k loads NP weight vectors and R token dwords for R·NP VPDPWSSDs), then the group's float
// epilogue into per-tile sums.
#include "libquant/kernels/affine_i16_vnni.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "libquant/cpu_features.h"
#include "libquant/kernels/aligned_buffer.h"
#include "libquant/parallel.h"

namespace qt::kernels {

#define QT_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))

bool affine_i16_gemm_supported(int bits, int64_t k, int64_t g) {
  return kernel_level() == KernelLevel::AVX512 && cpu_features().avx512_vnni && (bits == 4 || bits == 8) && g > 0 &&
         g % 32 == 0 && g <= 256 && k % g == 0;
}

namespace {

constexpr int kMR = 6, kNP = 4;

// One token: per group d = max|x| / 32767, x̃ = round-to-nearest-even(x / d) (as affine_gemv's
// prepare), and the group sum X of x.
QT_VNNI void round_token(const float* x, int64_t k, int64_t g, int16_t* q, float* d, float* xs) {
  for (int64_t g0 = 0, gi = 0; g0 < k; g0 += g, ++gi) {
    __m512 amax = _mm512_setzero_ps(), sum = _mm512_setzero_ps();
    for (int64_t j = g0; j < g0 + g; j += 16) {
      const __m512 v = _mm512_loadu_ps(x + j);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
      sum = _mm512_add_ps(sum, v);
    }
    const float a = _mm512_reduce_max_ps(amax);
    const __m512 inv = _mm512_set1_ps(a > 0.0f ? 32767.0f / a : 0.0f);
    d[gi] = a / 32767.0f;
    xs[gi] = _mm512_reduce_add_ps(sum);
    for (int64_t j = g0; j < g0 + g; j += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + j),
                          _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + j), inv))));
  }
}

// Panels [p0, p0 + np) of 16 rows: codes as int16 pairs, dword (q_2i, q_2i+1) of row r at
// pan[(p·k/2 + i)·16 + r]; scales and biases [p][group][16]. Rows past n are zero.
QT_VNNI void decode_panels(int bits, const uint8_t* codes, const float* scales, const float* biases, int64_t n,
                           int64_t k, int64_t g, int64_t p0, int np, int32_t* pan, float* st, float* bt) {
  const int64_t k2 = k / 2, groups = k / g, row_bytes = k * bits / 8;
  const __m512i stride = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(16));
  for (int p = 0; p < np; ++p)
    for (int r = 0; r < 16; ++r) {
      const int64_t row = (p0 + p) * 16 + r;
      int32_t* dst = pan + int64_t(p) * k2 * 16 + r;
      for (int64_t gi = 0; gi < groups; ++gi) {
        st[(p * groups + gi) * 16 + r] = row < n ? scales[row * groups + gi] : 0.0f;
        bt[(p * groups + gi) * 16 + r] = row < n ? biases[row * groups + gi] : 0.0f;
      }
      if (row >= n) {
        for (int64_t i = 0; i < k2; ++i) dst[i * 16] = 0;
        continue;
      }
      const uint8_t* src = codes + row * row_bytes;
      for (int64_t i = 0; i < k2; i += 16) {  // 16 pairs of k
        __m512i v;
        if (bits == 4) {  // byte i holds q_2i (low nibble) and q_2i+1 (high)
          const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
          v = _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32(15)),
                              _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0xF0)), 12));
        } else {  // two bytes per pair: zero-extend to two words
          v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i)));
        }
        _mm512_i32scatter_epi32(dst + i * 16, stride, v, 4);
      }
    }
}

// The int32 sums of one group: k-pairs [i0, i1) of NP panels against R token rows. Its own
// function, as int8_vnni's: inside the tile's group loop GCC would spill the accumulators.
template <int R, int NP>
QT_VNNI __attribute__((noinline)) void group_sums(const int32_t* const* pan, const int16_t* a, int64_t lda, int64_t i0,
                                                  int64_t i1, int32_t* acc_out) {
  __m512i acc[R][NP];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) acc[r][q] = _mm512_setzero_si512();
  for (int64_t i = i0; i < i1; ++i) {
    __m512i wv[NP];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) wv[q] = _mm512_load_si512(pan[q] + i * 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * i, 4);
      const __m512i av = _mm512_set1_epi32(pair);
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) acc[r][q] = _mm512_dpwssd_epi32(acc[r][q], av, wv[q]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) _mm512_store_si512(acc_out + (r * NP + q) * 16, acc[r][q]);
}

struct TileArgs {
  const int32_t* pan;   // the task's decoded panels
  const float *st, *bt;  // their scales and biases [p][group][16]
  int64_t k, g;
  const int16_t* a;      // R token rows of x̃, stride k
  const float *d, *xs;   // [R][groups]
  const float* bias;     // at the first panel's first row, or null
  float* y;              // at (first token, first row), stride ldy
  int64_t ldy;
  __mmask16 last_mask;   // rows of the last panel that exist
};

template <int R, int NP>
QT_VNNI void tile(const TileArgs& t) {
  const int64_t k2 = t.k / 2, groups = t.k / t.g;
  const int32_t* pan[NP];
  for (int q = 0; q < NP; ++q) pan[q] = t.pan + q * k2 * 16;
  alignas(64) float sum[R][NP][16] = {};
  alignas(64) int32_t acc[R][NP][16];
  for (int64_t gi = 0; gi < groups; ++gi) {
    group_sums<R, NP>(pan, t.a, t.k, gi * t.g / 2, (gi + 1) * t.g / 2, &acc[0][0][0]);
    for (int q = 0; q < NP; ++q) {
      const __m512 sv = _mm512_load_ps(t.st + (q * groups + gi) * 16), bv = _mm512_load_ps(t.bt + (q * groups + gi) * 16);
      for (int r = 0; r < R; ++r) {
        __m512 s = _mm512_fmadd_ps(bv, _mm512_set1_ps(t.xs[r * groups + gi]), _mm512_load_ps(sum[r][q]));
        s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(acc[r][q])),
                            _mm512_mul_ps(sv, _mm512_set1_ps(t.d[r * groups + gi])), s);
        _mm512_store_ps(sum[r][q], s);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < NP; ++q) {
      const __mmask16 mask = q == NP - 1 ? t.last_mask : __mmask16(0xFFFF);
      __m512 v = _mm512_load_ps(sum[r][q]);
      if (t.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, t.bias + q * 16));
      _mm512_mask_storeu_ps(t.y + r * t.ldy + q * 16, mask, v);
    }
}

using TileFn = void (*)(const TileArgs&);
template <int R>
constexpr std::array<TileFn, kNP + 1> tiles_of_rows() {
  return {nullptr, tile<R, 1>, tile<R, 2>, tile<R, 3>, tile<R, 4>};
}
constexpr std::array<std::array<TileFn, kNP + 1>, kMR + 1> kTiles = {
    std::array<TileFn, kNP + 1>{}, tiles_of_rows<1>(), tiles_of_rows<2>(), tiles_of_rows<3>(),
    tiles_of_rows<4>(),            tiles_of_rows<5>(), tiles_of_rows<6>()};

}  // namespace

void affine_i16_gemm(int bits, const uint8_t* codes, const float* scales, const float* biases, int64_t n, int64_t k,
                     int64_t g, const float* x, int64_t m, const float* bias, float* y) {
  const int64_t groups = k / g;
  thread_local std::vector<int16_t> xq;
  thread_local std::vector<float> xd, xs;
  xq.resize(size_t(m * k));
  xd.resize(size_t(m * groups));
  xs.resize(size_t(m * groups));
  int16_t* q = xq.data();
  float *d = xd.data(), *s = xs.data();
#pragma omp parallel for schedule(static) if (m * k > (1 << 15))
  for (int64_t t = 0; t < m; ++t) round_token(x + t * k, k, g, q + t * k, d + t * groups, s + t * groups);

  // A task: one group of kNP panels (decoded once into its thread's L2) against a slice of the
  // tokens. Slices only where the panel groups alone are too few for the threads (SmolLM2's k/v
  // projections are three groups); each slice decodes its panels again.
  const int64_t n_panels = (n + 15) / 16, pgroups = (n_panels + kNP - 1) / kNP;
  const int64_t row_blocks = (m + kMR - 1) / kMR;
  const int64_t want = 4 * int64_t(num_threads());
  const int64_t slices = std::clamp<int64_t>((want + pgroups - 1) / pgroups, 1, std::max<int64_t>(1, row_blocks / 8));
  const int64_t blocks_per_slice = (row_blocks + slices - 1) / slices;
#pragma omp parallel for schedule(dynamic, 1) if (m * n * k > (1 << 18))
  for (int64_t task = 0; task < pgroups * slices; ++task) {
    const int64_t pg = task / slices, sl = task % slices;
    const int64_t p0 = pg * kNP;
    const int np = int(std::min<int64_t>(kNP, n_panels - p0));
    thread_local AlignedBuffer pan_buf, st_buf, bt_buf;
    int32_t* pan = static_cast<int32_t*>(pan_buf.reserve(size_t(np) * size_t(k) / 2 * 16 * 4));
    float* st = static_cast<float*>(st_buf.reserve(size_t(np) * size_t(groups) * 16 * 4));
    float* bt = static_cast<float*>(bt_buf.reserve(size_t(np) * size_t(groups) * 16 * 4));
    decode_panels(bits, codes, scales, biases, n, k, g, p0, np, pan, st, bt);
    const int cols = int(std::min<int64_t>(16, n - (p0 + np - 1) * 16));
    TileArgs ta{pan, st, bt, k, g, nullptr, nullptr, nullptr, bias ? bias + p0 * 16 : nullptr, nullptr, n,
                __mmask16((1u << cols) - 1)};
    const int64_t b1 = std::min(row_blocks, (sl + 1) * blocks_per_slice);
    for (int64_t b = sl * blocks_per_slice; b < b1; ++b) {
      const int64_t t0 = b * kMR;
      const int rows = int(std::min<int64_t>(kMR, m - t0));
      ta.a = q + t0 * k;
      ta.d = d + t0 * groups;
      ta.xs = s + t0 * groups;
      ta.y = y + t0 * n + p0 * 16;
      kTiles[rows][np](ta);
    }
  }
}

}  // namespace qt::kernels
