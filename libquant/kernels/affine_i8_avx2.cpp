// affine_i8.h on AVX2: VPMADDUBSW multiplies unsigned codes by signed token bytes and adds pairs
// into int16 (at most 2·15·127, no saturation), the two nibble planes of an octet add in int16
// (≤ 7620), and VPMADDWD by ones widens into the int32 accumulators. A tile is R token rows × one
// panel of 16 output rows (two ymm): 2R accumulators over one group's octets, then the group's
// float epilogue, as the VNNI tile.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "libquant/kernels/affine_i8.h"

namespace qt::kernels::i8 {
namespace {

#define QT_AVX2 __attribute__((target("avx2,fma")))

constexpr int kMR = 4;

template <int R>
QT_AVX2 void tile_rows(const TileArgs& t) {
  const AffineI8& w = *t.w;
  const int64_t k8 = w.k / 8, go = w.g / 8, ng = w.ng;
  const uint8_t* pan = w.panels.data() + size_t(t.p0 * k8 * 64);
  const __m256i lo4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  __m256 sum[R][2];
  for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm256_setzero_ps();
  for (int64_t gi = 0; gi < ng; ++gi) {
    __m256i acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (int64_t o = gi * go; o < (gi + 1) * go; ++o) {
      const __m256i raw0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pan + o * 64));
      const __m256i raw1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pan + o * 64 + 32));
      const __m256i l0 = _mm256_and_si256(raw0, lo4), h0 = _mm256_and_si256(_mm256_srli_epi16(raw0, 4), lo4);
      const __m256i l1 = _mm256_and_si256(raw1, lo4), h1 = _mm256_and_si256(_mm256_srli_epi16(raw1, 4), lo4);
      for (int r = 0; r < R; ++r) {
        int32_t dl, dh;
        std::memcpy(&dl, t.a + r * w.k + o * 8, 4);
        std::memcpy(&dh, t.a + r * w.k + o * 8 + 4, 4);
        const __m256i al = _mm256_set1_epi32(dl), ah = _mm256_set1_epi32(dh);
        const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(l0, al), _mm256_maddubs_epi16(h0, ah));
        const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(l1, al), _mm256_maddubs_epi16(h1, ah));
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(p0, ones));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(p1, ones));
      }
    }
    const size_t off = size_t((t.p0 * ng + gi) * 16);
    for (int h = 0; h < 2; ++h) {
      const __m256 sv = _mm256_loadu_ps(w.scales.data() + off + 8 * h),
                   bv = _mm256_loadu_ps(w.biases.data() + off + 8 * h);
      for (int r = 0; r < R; ++r) {
        __m256 s = _mm256_fmadd_ps(bv, _mm256_set1_ps(t.bx[r * ng + gi]), sum[r][h]);
        sum[r][h] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][h]), _mm256_mul_ps(sv, _mm256_set1_ps(t.d[r * ng + gi])), s);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float out[16];
    _mm256_store_ps(out, sum[r][0]);
    _mm256_store_ps(out + 8, sum[r][1]);
    for (int c = 0; c < t.last_cols; ++c) t.y[r * t.ldy + c] = t.bias ? out[c] + t.bias[c] : out[c];
  }
}

void run_tile(const TileArgs& t, int rows, int panels) {
  (void)panels;  // one panel a tile
  switch (rows) {
    case 1: return tile_rows<1>(t);
    case 2: return tile_rows<2>(t);
    case 3: return tile_rows<3>(t);
    default: return tile_rows<4>(t);
  }
}

QT_AVX2 float hmax8(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

QT_AVX2 float amax_of(const float* p, int64_t len) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= len; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(p + j)));
  float a = hmax8(m);
  for (; j < len; ++j) a = std::max(a, std::abs(p[j]));
  return a;
}

// quantize_token_i8_ref on 8 lanes (as the VNNI level's: exact absmax, VCVTPS2DQ's rounding).
QT_AVX2 void quantize(const float* x, int64_t k, int64_t g, bool per_token, int8_t* q, float* d, float* bx) {
  const float tok_amax = per_token ? amax_of(x, k) : 0.0f;
  for (int64_t g0 = 0, gi = 0; g0 < k; g0 += g, ++gi) {
    float s = (per_token ? tok_amax : amax_of(x + g0, g)) / 127.0f;
    if (s == 0.0f) s = 1.0f;
    const float inv = 1.0f / s;
    const __m256 vinv = _mm256_set1_ps(inv);
    __m256i sum = _mm256_setzero_si256();
    for (int64_t j = g0; j < g0 + g; j += 8) {  // g is a multiple of 8
      const __m256i v =
          _mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), vinv)), _mm256_set1_epi32(-127));
      const __m256i c = _mm256_min_epi32(v, _mm256_set1_epi32(127));
      sum = _mm256_add_epi32(sum, c);
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), c);
      for (int i = 0; i < 8; ++i) q[j + i] = int8_t(lanes[i]);
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    d[gi] = s;
    bx[gi] = s * float(_mm_cvtsi128_si32(s4));
  }
}

}  // namespace

const Isa& isa_avx2() {
  static const Isa is{kMR, 1, run_tile, quantize};
  return is;
}

}  // namespace qt::kernels::i8
