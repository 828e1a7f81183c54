// ggml_dot_i8 (ggml_dot_i8.h). Layouts: ggml-common.h's block_q4_0 / q4_1 / q8_0 / q4_K / q6_K (the
// same offsets as formats/ggml_quants_legacy.cpp and ggml_quants_k.cpp decode). Every kernel sums
// codes × int8 token values exactly in int32 lanes (VPDPBUSD: unsigned codes, signed token), then
// scales each lane's block in fp32; a code offset (Q4_0's 8, Q8_0's 128 from making its signed
// codes unsigned, Q6_K's 32) comes back through the token's block sums.
#include "libquant/kernels/ggml_dot_i8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "formats/ggml_blocks.h"
#include "libquant/cpu_features.h"
#include "libquant/kernels/ggml_decode.h"

namespace qt::kernels {
namespace {

#define QT_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))

QT_VNNI inline float half(const uint8_t* p) { return _cvtsh_ss(uint16_t(p[0] | p[1] << 8)); }
QT_VNNI inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
// 16 bytes of a legacy 4-bit block -> its 32 codes in element order (low nibbles, then high): the
// bytes loaded into both halves, the upper half shifted by 4, one mask.
QT_VNNI inline __m256i nibbles32(const uint8_t* p) {
  const __m256i both = _mm256_broadcastsi128_si256(load16(p));
  return _mm256_and_si256(_mm256_srlv_epi16(both, _mm256_set_epi64x(0x0004000400040004, 0x0004000400040004, 0, 0)),
                          _mm256_set1_epi8(0x0f));
}

// The legacy types, two blocks of 32 per VPDPBUSD:
// Q4_0 (d, codes - 8), Q4_1 (d, m, codes), Q8_0 (d, signed codes, + 128 as unsigned). The block
// scales d·dx and the offset terms are computed 16 blocks at a time (one VCVTPH2PS, one FMA).
enum class Legacy { Q4_0, Q4_1, Q8_0 };

template <Legacy kT>
QT_VNNI float legacy(const uint8_t* src, const GgmlTokenI8& x, size_t nb) {
  constexpr size_t kBytes = kT == Legacy::Q4_0 ? 18 : kT == Legacy::Q4_1 ? 20 : 34;
  auto codes = [](const uint8_t* blk) QT_VNNI {  // a block's 32 codes, unsigned, in element order
    if constexpr (kT == Legacy::Q8_0)
      return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                              _mm256_set1_epi8(char(0x80)));
    return nibbles32(blk + (kT == Legacy::Q4_1 ? 4 : 2));
  };
  const __m512i pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 acc = _mm512_setzero_ps();
  __m512 extra = _mm512_setzero_ps();  // the offsets' and Q4_1's minimums' terms, per block
  alignas(64) float scale[16];
  for (size_t b0 = 0; b0 < nb; b0 += 16) {
    const size_t n = std::min<size_t>(16, nb - b0);
    alignas(32) uint16_t dh[16] = {}, mh[16] = {};
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* blk = src + (b0 + i) * kBytes;
      dh[i] = uint16_t(blk[0] | blk[1] << 8);
      if constexpr (kT == Legacy::Q4_1) mh[i] = uint16_t(blk[2] | blk[3] << 8);
    }
    const __mmask16 valid = __mmask16((1u << n) - 1);
    const __m512 dx = _mm512_maskz_loadu_ps(valid, x.d.data() + b0);
    const __m512 sums = _mm512_maskz_loadu_ps(valid, x.sum32.data() + b0);
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh)));
    const __m512 s = _mm512_mul_ps(dw, dx);
    _mm512_store_ps(scale, s);
    if constexpr (kT == Legacy::Q4_0) extra = _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(-8.0f)), sums, extra);
    if constexpr (kT == Legacy::Q8_0) extra = _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(-128.0f)), sums, extra);
    if constexpr (kT == Legacy::Q4_1) {
      const __m512 m = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(mh)));
      extra = _mm512_fmadd_ps(_mm512_mul_ps(m, dx), sums, extra);
    }
    size_t i = 0;
    for (; i + 2 <= n; i += 2) {  // two blocks a VPDPBUSD: lanes 0..7 block i, 8..15 block i + 1
      const uint8_t* blk = src + (b0 + i) * kBytes;
      ggml_prefetch_ahead(blk, 2 * int(kBytes));
      const __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(codes(blk)), codes(blk + kBytes), 1);
      const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c, _mm512_loadu_si512(x.q.data() + 32 * (b0 + i)));
      const __m512 lane_s = _mm512_permutexvar_ps(_mm512_add_epi32(pair, _mm512_set1_epi32(int(i))), s);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), lane_s, acc);
    }
    if (i < n) {  // an odd last block
      const uint8_t* blk = src + (b0 + i) * kBytes;
      const __m256i p =
          _mm256_dpbusd_epi32(_mm256_setzero_si256(), codes(blk),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q.data() + 32 * (b0 + i))));
      acc = _mm512_add_ps(acc, _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(scale[i]))));
    }
  }
  return _mm512_reduce_add_ps(acc) + _mm512_reduce_add_ps(extra);
}

// Q4_K: super-blocks of 256 = 8 sub-blocks of 32 with 6-bit scales and minimums (d·sc·q - dmin·mn);
// bytes qs[32j..32j+31] hold sub-block 2j in their low nibbles and 2j+1 in their high ones.
QT_VNNI float q4_k(const uint8_t* src, const GgmlTokenI8& x, size_t nb) {
  __m512 acc = _mm512_setzero_ps();
  __m256 mins = _mm256_setzero_ps();
  const __m512i pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i m = _mm512_set1_epi8(0x0f);
  const __m512i upper4 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);  // the high half: >> 4
  for (size_t b = 0; b < nb; ++b, src += 144) {
    ggml_prefetch_ahead(src, 144);
    const float d = half(src), dmin = half(src + 2);
    const uint8_t* s = src + 4;
    const uint8_t* qs = src + 16;
    alignas(32) int32_t sc[8], mn[8];
    for (int t = 0; t < 4; ++t) {
      sc[t] = s[t] & 63;
      mn[t] = s[t + 4] & 63;
      sc[t + 4] = (s[t + 8] & 0xF) | ((s[t] >> 6) << 4);
      mn[t + 4] = (s[t + 8] >> 4) | ((s[t + 4] >> 6) << 4);
    }
    const __m256 dxv = _mm256_loadu_ps(x.d.data() + 8 * b);
    const __m256i mnv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mn));
    // f[t] = d · sc[t] · dx[t], on lanes 0..7
    const __m512 f = _mm512_castps256_ps512(_mm256_mul_ps(
        _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)))),
        dxv));
    const int8_t* q = x.q.data() + 256 * b;
    for (int j = 0; j < 4; ++j) {
      const __m512i both = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j)));
      const __m512i c = _mm512_and_si512(_mm512_srlv_epi16(both, upper4), m);
      const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c, _mm512_loadu_si512(q + 64 * j));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                            _mm512_permutexvar_ps(_mm512_add_epi32(pair, _mm512_set1_epi32(2 * j)), f), acc);
    }
    mins = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(mnv)), dxv),
                           _mm256_loadu_ps(x.sum32.data() + 8 * b), mins);
  }
  return _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(mins));
}

// Q6_K: super-blocks of 256 = 16 sub-blocks of 16 with int8 scales, d·sc·(q - 32); element
// 128h + 32k + l (l < 32) has its low 4 bits in ql[64h + 32(k%2) + l] >> 4(k/2) and its high 2 in
// qh[32h + l] >> 2k. Codes k and k+1 (k even) fill 64 lanes; lane group i of 4 lanes is sub-block
// 8h + 2k + i.
QT_VNNI float q6_k(const uint8_t* src, const GgmlTokenI8& x, size_t nb) {
  __m512 acc = _mm512_setzero_ps(), offs = _mm512_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
  const __m512i group = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i pair = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  for (size_t b = 0; b < nb; ++b, src += 210) {
    ggml_prefetch_ahead(src, 210);
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const float d = half(src + 208);
    // f[i] = d · sc[i] · dx(sub-block i's block of 32)
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(src + 192)));
    const __m512 dx = _mm512_permutexvar_ps(pair, _mm512_castps256_ps512(_mm256_loadu_ps(x.d.data() + 8 * b)));
    const __m512 f = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(d), sc), dx);
    offs = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(_mm512_loadu_si512(x.sum16.data() + 16 * b)), offs);
    const int8_t* q = x.q.data() + 256 * b;
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h + 32));
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 32 * h));
      auto code = [&](__m256i lo, int lshift, int hshift) QT_VNNI {
        const __m256i l = _mm256_and_si256(_mm256_srli_epi16(lo, lshift), m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hb, hshift), m2);
        return _mm256_or_si256(l, _mm256_slli_epi16(hi, 4));
      };
      for (int k = 0; k < 4; k += 2) {
        const __m256i c0 = k == 0 ? code(l0, 0, 0) : code(l0, 4, 4);
        const __m256i c1 = k == 0 ? code(l1, 0, 2) : code(l1, 4, 6);
        const __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c, _mm512_loadu_si512(q + 128 * h + 32 * k));
        const __m512 lane_f = _mm512_permutexvar_ps(_mm512_add_epi32(group, _mm512_set1_epi32(8 * h + 2 * k)), f);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), lane_f, acc);
      }
    }
  }
  return _mm512_reduce_add_ps(acc) - 32.0f * _mm512_reduce_add_ps(offs);
}

QT_VNNI void quantize_vnni(const float* x, int64_t k, GgmlTokenI8* t) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    t->d[size_t(b)] = d;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t->q.data() + 32 * b), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t->q.data() + 32 * b + 16), _mm512_cvtsepi32_epi8(q1));
    t->sum16[size_t(2 * b)] = _mm512_reduce_add_epi32(q0);
    t->sum16[size_t(2 * b + 1)] = _mm512_reduce_add_epi32(q1);
    t->sum32[size_t(b)] = float(t->sum16[size_t(2 * b)] + t->sum16[size_t(2 * b + 1)]);
  }
}

bool has_vnni() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_vnni && f.f16c && f.fma;
}

}  // namespace

void ggml_quantize_token(const float* x, int64_t k, GgmlTokenI8* t) {
  t->q.resize(size_t(k));
  t->d.resize(size_t(k / 32));
  t->sum16.resize(size_t(k / 16));
  t->sum32.resize(size_t(k / 32));
  if (has_vnni()) return quantize_vnni(x, k, t);
  for (int64_t b = 0; b < k / 32; ++b) {  // the same rule in scalar form (nearest, ties to even)
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[32 * b + j]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    t->d[size_t(b)] = amax / 127.0f;
    for (int h = 0; h < 2; ++h) {
      int32_t s = 0;
      for (int j = 16 * h; j < 16 * h + 16; ++j) {
        const int8_t q = int8_t(std::nearbyint(x[32 * b + j] * id));
        t->q[size_t(32 * b + j)] = q;
        s += q;
      }
      t->sum16[size_t(2 * b + h)] = s;
    }
    t->sum32[size_t(b)] = float(t->sum16[size_t(2 * b)] + t->sum16[size_t(2 * b + 1)]);
  }
}

GgmlDotI8Fn ggml_dot_i8(uint32_t type) {
  if (!has_vnni()) return nullptr;
  switch (GgmlType(type)) {
    case GgmlType::Q4_0: return legacy<Legacy::Q4_0>;
    case GgmlType::Q4_1: return legacy<Legacy::Q4_1>;
    case GgmlType::Q8_0: return legacy<Legacy::Q8_0>;
    case GgmlType::Q4_K: return q4_k;
    case GgmlType::Q6_K: return q6_k;
    default: return nullptr;
  }
}

}  // namespace qt::kernels
