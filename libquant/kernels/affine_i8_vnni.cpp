// affine_i8.h on AVX-512 VNNI. A tile is R token rows × NP panels of 16 output rows: R·NP int32
// accumulators over one group's octets of k, each octet's 64 bytes per panel split into its two
// nibble planes (AND, and shift + AND) that VPDPBUSD takes as its unsigned operand against R
// broadcast token dwords (signed); then the group's float epilogue into per-tile sums.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "libquant/kernels/affine_i8.h"
#include "libquant/kernels/vnni_group_sums.h"

namespace qt::kernels::i8 {
namespace {

#define QT_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))

constexpr int kMR = 6, kNP = 4;

// Octets [o0, o1): panel q's octet o at pan[q] + 64·o, token row r's at a + r·lda + 8·o. Its own
// function, not inlined into the tile (as vnni_group_sums: the accumulators stay in registers).
// The high plane reloads the octet (an L1 hit) rather than keeping NP more registers live.
template <int R, int NP>
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) void nibble_group_sums(const uint8_t* const* pan,
                                                                                        const int8_t* a, int64_t lda,
                                                                                        int64_t o0, int64_t o1,
                                                                                        int32_t* acc_out) {
  __m512i acc[R][NP];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) acc[r][q] = _mm512_setzero_si512();
  const __m512i lo4 = _mm512_set1_epi8(0x0f);
  for (int64_t o = o0; o < o1; ++o) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i wv[NP];
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) {
        if (R == 1 && h == 0) _mm_prefetch(reinterpret_cast<const char*>(pan[q] + o * 64 + 2048), _MM_HINT_T0);
        const __m512i raw = _mm512_loadu_si512(pan[q] + o * 64);
        wv[q] = _mm512_and_si512(h == 0 ? raw : _mm512_srli_epi16(raw, 4), lo4);
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        int32_t dw;
        std::memcpy(&dw, a + r * lda + o * 8 + h * 4, 4);
        const __m512i av = _mm512_set1_epi32(dw);
#pragma GCC unroll 8
        for (int q = 0; q < NP; ++q) acc[r][q] = _mm512_dpbusd_epi32(acc[r][q], wv[q], av);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) _mm512_store_si512(acc_out + (r * NP + q) * 16, acc[r][q]);
}

template <int R, int NP>
QT_VNNI void tile(const TileArgs& t) {
  const AffineI8& w = *t.w;
  const int64_t k8 = w.k / 8, go = w.g / 8, ng = w.ng;
  const uint8_t* pan[NP];
  for (int q = 0; q < NP; ++q) pan[q] = w.panels.data() + size_t((t.p0 + q) * k8 * 64);
  alignas(64) float sum[R][NP][16];
  alignas(64) int32_t acc[R][NP][16];
  for (int64_t gi = 0; gi < ng; ++gi) {
    nibble_group_sums<R, NP>(pan, t.a, w.k, gi * go, (gi + 1) * go, &acc[0][0][0]);
    for (int q = 0; q < NP; ++q) {
      const size_t off = size_t(((t.p0 + q) * ng + gi) * 16);
      const __m512 sv = _mm512_loadu_ps(w.scales.data() + off), bv = _mm512_loadu_ps(w.biases.data() + off);
      for (int r = 0; r < R; ++r) {
        const __m512 prev = gi == 0 ? _mm512_setzero_ps() : _mm512_load_ps(sum[r][q]);
        __m512 s = _mm512_fmadd_ps(bv, _mm512_set1_ps(t.bx[r * ng + gi]), prev);
        s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(acc[r][q])),
                            _mm512_mul_ps(sv, _mm512_set1_ps(t.d[r * ng + gi])), s);
        _mm512_store_ps(sum[r][q], s);
      }
    }
  }
  const __mmask16 last = __mmask16((1u << t.last_cols) - 1);
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < NP; ++q) {
      const __mmask16 mask = q == NP - 1 ? last : __mmask16(0xFFFF);
      __m512 v = _mm512_load_ps(sum[r][q]);
      if (t.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, t.bias + q * 16));
      _mm512_mask_storeu_ps(t.y + r * t.ldy + q * 16, mask, v);
    }
}

using TileFn = void (*)(const TileArgs&);
constexpr auto kTiles = tile_table<TileFn, kMR, kNP>([]<int R, int P>() -> TileFn { return tile<R, P>; });

void run_tile(const TileArgs& t, int rows, int panels) { kTiles[size_t(rows)][size_t(panels)](t); }

// quantize_token_i8_ref on 16 lanes: the same absmax (max is exact in any order), step and
// reciprocal as scalars, x·inv rounded to nearest even by VCVTPS2DQ, saturated to int8 (|x·inv|
// ≤ 127 up to one rounding, so the clamp to −127 never acts), integer group sums.
QT_VNNI float amax_of(const float* p, int64_t len) {
  __m512 m = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(p + j)));
  float a = _mm512_reduce_max_ps(m);
  for (; j < len; ++j) a = std::max(a, std::abs(p[j]));
  return a;
}

QT_VNNI void quantize(const float* x, int64_t k, int64_t g, bool per_token, int8_t* q, float* d, float* bx) {
  const float tok_amax = per_token ? amax_of(x, k) : 0.0f;
  for (int64_t g0 = 0, gi = 0; g0 < k; g0 += g, ++gi) {
    float s = (per_token ? tok_amax : amax_of(x + g0, g)) / 127.0f;
    if (s == 0.0f) s = 1.0f;
    const float inv = 1.0f / s;
    const __m512 vinv = _mm512_set1_ps(inv);
    __m512i sum = _mm512_setzero_si512();
    int64_t j = g0;
    for (; j + 16 <= g0 + g; j += 16) {
      const __m512i v =
          _mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + j), vinv)), _mm512_set1_epi32(-127));
      const __m128i b = _mm512_cvtsepi32_epi8(v);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + j), b);
      sum = _mm512_add_epi32(sum, _mm512_cvtepi8_epi32(b));
    }
    int32_t isum = _mm512_reduce_add_epi32(sum);
    for (; j < g0 + g; ++j) {
      const float v = std::nearbyint(x[j] * inv);
      q[j] = int8_t(std::min(std::max(v, -127.0f), 127.0f));
      isum += q[j];
    }
    d[gi] = s;
    bx[gi] = s * float(isum);
  }
}

}  // namespace

const Isa& isa_vnni() {
  static const Isa is{kMR, kNP, run_tile, quantize};
  return is;
}

}  // namespace qt::kernels::i8
