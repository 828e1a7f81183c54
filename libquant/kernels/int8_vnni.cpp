// AVX-512 VNNI int8 GEMM (int8_vnni.h). Compiled without FMA contraction so the epilogue rounds
// its multiply and add separately, as reference_gemm does.
#pragma GCC optimize("fp-contract=off")
#include "libquant/kernels/int8_vnni.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "libquant/kernels/vnni_group_sums.h"
#include "libquant/parallel.h"

namespace qt::kernels {

Int8Vnni pack_int8_vnni(const int8_t* q, const float* s, int64_t n, int64_t k, int64_t gl) {
  Int8Vnni w;
  w.n = n;
  w.k = k;
  w.gl = gl;
  w.ng = k / gl;
  w.n_panels = (n + 15) / 16;
  // Every byte of the panels is written below (padding rows past n as zeros), panels in parallel, each
  // written front to back: the page faults of these fresh gigabytes (an 8B model's) land on every
  // thread and in order, rather than zeroed on one thread first.
  w.panels.resize(size_t(w.n_panels * k * 16));
  w.colsum128.assign(size_t(w.n_panels * w.ng * 16), 0);
  w.scales.assign(size_t(w.n_panels * w.ng * 16), 0.0f);
  // Packing runs at every model load; one thread over SmolLM2's 135M codes took a visible part of a
  // short eval-ppl.
#pragma omp parallel for schedule(static) if (n * k > (1 << 20))
  for (int64_t p = 0; p < w.n_panels; ++p) {
    const int rows = int(std::min<int64_t>(16, n - p * 16));
    uint32_t* dst = reinterpret_cast<uint32_t*>(w.panels.data()) + p * (k / 4) * 16;
    for (int64_t c = 0; c < k; c += 4, dst += 16) {  // a dword of 4 consecutive k per row
      for (int r = 0; r < rows; ++r) std::memcpy(dst + r, q + (p * 16 + r) * k + c, 4);
      for (int r = rows; r < 16; ++r) dst[r] = 0;
    }
  }
#pragma omp parallel for schedule(static) if (n * k > (1 << 20))
  for (int64_t row = 0; row < n; ++row) {
    const int64_t p = row / 16, r = row % 16;
    const int8_t* src = q + row * k;
    for (int64_t g = 0; g < w.ng; ++g) {
      int32_t sum = 0;
      for (int64_t c = g * gl; c < (g + 1) * gl; ++c) sum += src[c];
      w.colsum128[size_t((p * w.ng + g) * 16 + r)] = 128 * sum;
      w.scales[size_t((p * w.ng + g) * 16 + r)] = s[row * w.ng + g];
    }
  }
  return w;
}

namespace {

// A tile is R token rows × NP panels (16 output rows each): R·NP int32 accumulators (24 of the
// 32 zmm registers at 6 × 4), each k-block loads NP weight vectors and R activation dwords for
// R·NP VPDPBUSDs — enough independent chains to cover its latency on both VNNI ports, and a
// load for every 2.4 of them (an 8 × 1 tile needed 9 loads per 8 and had 8 chains).
constexpr int kMR = 6, kNP = 4;

template <int R, int NP>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile(const Int8Vnni& w, int64_t p0, const uint8_t* a,
                                                                 int64_t lda, const float* sx, float* y, int64_t ldy,
                                                                 __mmask16 last_mask) {
  const int64_t k4 = w.k / 4, g4 = w.gl / 4;
  const uint8_t* pan[NP];
  for (int q = 0; q < NP; ++q) pan[q] = reinterpret_cast<const uint8_t*>(w.panels.data()) + size_t((p0 + q) * k4 * 64);
  // Σ over groups per (row, panel), in the order reference_gemm adds them, from 0.0f. The first
  // group adds to a zero register rather than to a zeroed array: at one group (per-channel
  // scales) the array's memset (a rep stos of R·NP·64 bytes) cost a third of the tile's own time.
  alignas(64) float sum[R][NP][16];
  alignas(64) int32_t acc[R][NP][16];
  for (int64_t g = 0; g < w.ng; ++g) {
    vnni_group_sums<VnniDot::U8S8, R, NP>(pan, a, lda, g * g4, (g + 1) * g4, &acc[0][0][0]);
    for (int q = 0; q < NP; ++q) {
      const size_t off = size_t(((p0 + q) * w.ng + g) * 16);
      const __m512i cs = _mm512_loadu_si512(w.colsum128.data() + off);
      const __m512 sw = _mm512_loadu_ps(w.scales.data() + off);
      for (int r = 0; r < R; ++r) {
        const __m512 d = _mm512_mul_ps(sw, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(acc[r][q]), cs)));
        const __m512 prev = g == 0 ? _mm512_setzero_ps() : _mm512_load_ps(sum[r][q]);
        _mm512_store_ps(sum[r][q], _mm512_add_ps(prev, d));
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 s = _mm512_set1_ps(sx[r]);
    for (int q = 0; q < NP; ++q)
      _mm512_mask_storeu_ps(y + r * ldy + (p0 + q) * 16, q == NP - 1 ? last_mask : __mmask16(0xFFFF),
                            _mm512_mul_ps(s, _mm512_load_ps(sum[r][q])));
  }
}

using TileFn = void (*)(const Int8Vnni&, int64_t, const uint8_t*, int64_t, const float*, float*, int64_t, __mmask16);
// kTiles[rows][panels]
constexpr auto kTiles = tile_table<TileFn, kMR, kNP>([]<int R, int P>() -> TileFn { return tile<R, P>; });

}  // namespace

namespace {

// quantize_activations_int8 of one row, written as a + 128 (VPDPBUSD's unsigned operand): the same
// absmax, s = absmax/127 (1 for a zero row), inv = 1/s, codes rint(x·inv) by VCVTPS2DQ in the
// default round-to-nearest-even mode, saturated to int8 — the reference's bytes, flipped.
__attribute__((target("avx512f,avx512bw"))) void quantize_row_u8(const float* x, int64_t k, uint8_t* out,
                                                                 float* scale) {
  __m512 amax = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  float a = _mm512_reduce_max_ps(amax);
  for (; i < k; ++i) a = std::max(a, std::abs(x[i]));
  float s = a / 127.0f;
  if (s == 0.0f) s = 1.0f;
  const float inv = 1.0f / s;
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m128i flip = _mm_set1_epi8(char(0x80));
  for (i = 0; i + 16 <= k; i += 16) {
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_xor_si128(_mm512_cvtsepi32_epi8(q), flip));
  }
  for (; i < k; ++i) {
    const float v = std::rint(x[i] * inv);
    out[i] = uint8_t(int8_t(std::min(std::max(v, -128.0f), 127.0f))) ^ 0x80;
  }
  *scale = s;
}

}  // namespace

void quantize_token_u8_vnni(const float* x, int64_t k, uint8_t* au, float* sx) { quantize_row_u8(x, k, au, sx); }

void gemv_u8_vnni(const Int8Vnni& w, const uint8_t* au, float sx, int64_t p0, int64_t p1, float* y) {
  for (int64_t p = p0; p < p1; p += kNP) {
    const int panels = int(std::min<int64_t>(kNP, p1 - p));
    const int cols = int(std::min<int64_t>(16, w.n - (p + panels - 1) * 16));
    kTiles[1][panels](w, p, au, w.k, &sx, y, w.n, __mmask16((1u << cols) - 1));
  }
}

void gemm_int8_vnni_f32(const Int8Vnni& w, const float* x, int64_t m, float* y) {
  thread_local std::vector<uint8_t> au;
  thread_local std::vector<float> sx;
  au.resize(size_t(m * w.k));
  sx.resize(size_t(m));
  uint8_t* aq = au.data();
  float* sp = sx.data();
#pragma omp parallel for schedule(static) if (m * w.k > (1 << 15))
  for (int64_t t = 0; t < m; ++t) quantize_row_u8(x + t * w.k, w.k, aq + t * w.k, sp + t);
  gemm_u8_vnni(w, aq, sp, m, y);
}

void gemm_int8_vnni_f32_shared(const Int8Vnni* const* ws, int count, const float* x, int64_t m, float* const* ys) {
  const int64_t k = ws[0]->k;
  thread_local std::vector<uint8_t> au;
  thread_local std::vector<float> sx;
  au.resize(size_t(m * k));
  sx.resize(size_t(m));
  uint8_t* aq = au.data();
  float* sp = sx.data();
  const int64_t row_blocks = (m + kMR - 1) / kMR;
  constexpr int kMaxShared = 4;
  int64_t first_tile[kMaxShared + 1] = {0}, macs = 0;
  for (int i = 0; i < count; ++i) {
    first_tile[i + 1] = first_tile[i] + (ws[i]->n_panels + kNP - 1) / kNP * row_blocks;
    macs += m * ws[i]->n * k;
  }
  const int64_t tiles = first_tile[count];
#pragma omp parallel if (m * k > (1 << 15) || macs > (1 << 18))
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < m; ++t) quantize_row_u8(x + t * k, k, aq + t * k, sp + t);
      // Tiles of matrix i are numbered after those of matrices 0..i−1, row blocks innermost.
#pragma omp for schedule(dynamic, 4)
    for (int64_t g = 0; g < tiles; ++g) {
      int i = 0;
      while (g >= first_tile[i + 1]) ++i;
      const Int8Vnni& w = *ws[i];
      const int64_t lt = g - first_tile[i];
      const int64_t p0 = lt / row_blocks * kNP, rb = lt % row_blocks;
      const int64_t t0 = rb * kMR;
      const int rows = int(std::min<int64_t>(kMR, m - t0));
      const int panels = int(std::min<int64_t>(kNP, w.n_panels - p0));
      const int cols = int(std::min<int64_t>(16, w.n - (p0 + panels - 1) * 16));
      const __mmask16 mask = __mmask16((1u << cols) - 1);
      kTiles[rows][panels](w, p0, aq + t0 * k, k, sp + t0, ys[i] + t0 * w.n, w.n, mask);
    }
  }
}

void gemm_u8_vnni(const Int8Vnni& w, const uint8_t* ap, const float* sx, int64_t m, float* y) {
  const int64_t row_blocks = (m + kMR - 1) / kMR, col_blocks = (w.n_panels + kNP - 1) / kNP;
  const int64_t tiles = col_blocks * row_blocks;
  const bool par = m * w.n * w.k > (1 << 18);
  // Row blocks innermost: a tile's panels stay in L2 while the token rows pass.
#pragma omp parallel for schedule(dynamic, 4) if (par)
  for (int64_t i = 0; i < tiles; ++i) {
    const int64_t p0 = i / row_blocks * kNP, rb = i % row_blocks;
    const int64_t t0 = rb * kMR;
    const int rows = int(std::min<int64_t>(kMR, m - t0));
    const int panels = int(std::min<int64_t>(kNP, w.n_panels - p0));
    const int cols = int(std::min<int64_t>(16, w.n - (p0 + panels - 1) * 16));
    const __mmask16 mask = __mmask16((1u << cols) - 1);
    kTiles[rows][panels](w, p0, ap + t0 * w.k, w.k, sx + t0, y + t0 * w.n, w.n, mask);
  }
}

}  // namespace qt::kernels
