// ggml_decoder_avx512 (ggml_decode.h). Each loop restates its scalar twin's operations lane by lane:
// the codes as integers, one conversion to fp32, then the twin's multiply and add/subtract, each
// rounded on its own (this file is built without contraction, as the twins are).
#pragma GCC optimize("fp-contract=off")
#include "libquant/kernels/ggml_decode.h"

#include <immintrin.h>

#include "formats/ggml_blocks.h"
#include "formats/ggml_quants_common.h"
#include "libquant/cpu_features.h"

namespace qt::kernels {
namespace {

#define QT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))

// The fp16 field at p -> fp32: VCVTPH2PS is exact, as h2f.
QT_AVX512 inline float half(const uint8_t* p) { return _cvtsh_ss(uint16_t(p[0] | p[1] << 8)); }

// 16 bytes -> their low and high nibbles as 32-bit lanes.
QT_AVX512 inline __m512i low_nibbles(__m128i raw) {
  return _mm512_cvtepu8_epi32(_mm_and_si128(raw, _mm_set1_epi8(0x0f)));
}
QT_AVX512 inline __m512i high_nibbles(__m128i raw) {
  return _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f)));
}
QT_AVX512 inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
QT_AVX512 inline __m512 to_f32(__m512i v) { return _mm512_cvtepi32_ps(v); }

// Each walker hands out the row's values 16 at a time, out(i, w) with w the values i..i+15; a
// decoder stores them, a dot product multiplies them into its accumulators.
struct Store {
  float* dst;
  QT_AVX512 void operator()(size_t i, __m512 w) { _mm512_storeu_ps(dst + i, w); }
};
struct Dot {
  const float* x;
  __m512 acc0, acc1;  // zeroed by dot()
  QT_AVX512 void operator()(size_t i, __m512 w) {
    if (i & 16) {
      acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), w, acc1);
    } else {
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), w, acc0);
    }
  }
};

// A 4-bit (5-bit) block's weights take one of 16 (32) values: each is computed once per block
// with the scalar rule's operations (iota standing for the code) and the codes look them up
// (VPERMPS, VPERMT2PS) — the same values as computing every weight, at a fraction of the work.
QT_AVX512 inline __m512 iota16(int first) {
  return _mm512_add_ps(_mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                       _mm512_set1_ps(float(first)));
}

// IQ4_NL's grid (ggml::kIq4nl) as fp32.
QT_AVX512 inline __m512 iq4nl_grid() {
  return to_f32(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ggml::kIq4nl))));
}

// One block's 32 lookups of its 16 code bytes (low nibbles: elements 0..15, high: 16..31) in
// `table`, handed out from element `at`: in the elements' order (the decoders) ...
struct NibblesInOrder {
  template <class Out>
  QT_AVX512 static void run(const uint8_t* codes, __m512 table, size_t at, Out& out) {
    const __m128i raw = load16(codes);
    out(at, _mm512_permutexvar_ps(low_nibbles(raw), table));
    out(at + 16, _mm512_permutexvar_ps(high_nibbles(raw), table));
  }
};
// ... or, for the one-token dots, in fewer shuffles: the 16 code bytes broadcast to the four
// 128-bit lanes and shifted by 0, 4, 8, 12 bits a lane put nibble n = i / 4 of dword i % 4 in lane
// i's low bits (VPERMPS reads only those), then a shift by 16 gives nibbles n + 4: one VPERMPS per
// 16 codes, where widening them first costs a VPMOVZXBD each on the same port. Nibble n of dword D
// is element 4D + n / 2 (+ 16 for odd n, the high nibbles): the token is read in that order
// (nibble_token_order).
struct NibblesShifted {
  template <class Out>
  QT_AVX512 static void run(const uint8_t* codes, __m512 table, size_t at, Out& out) {
    const __m512i lane_shift = _mm512_set_epi32(12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0);
    const __m512i v = _mm512_srlv_epi32(_mm512_broadcast_i32x4(load16(codes)), lane_shift);
    out(at, _mm512_permutexvar_ps(v, table));
    out(at + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 16), table));
  }
};

// Q4_0: d * (q - 8); IQ4_NL: d * kvalues[q] (the grid as fp32, times d: one product a value).
template <bool kGrid, class Lookup, class Out>
QT_AVX512 inline void d_times_value(const uint8_t* src, size_t nb, Out& out) {
  const __m512 values = kGrid ? iq4nl_grid() : iota16(-8);
  for (size_t b = 0; b < nb; ++b, src += 18) {
    ggml_prefetch_ahead(src, 1);
    Lookup::run(src + 2, _mm512_mul_ps(_mm512_set1_ps(half(src)), values), 32 * b, out);
  }
}

// x in NibblesShifted's order: out[32b + 16h + i] = x[32b + element of nibble i / 4 + 4h of
// dword i % 4].
void nibble_token_order(const float* x, size_t nb, float* out) {
  for (size_t b = 0; b < nb; ++b)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 16; ++i) {
        const int n = i / 4 + 4 * h, d = i % 4;
        out[32 * b + 16 * size_t(h) + size_t(i)] = x[32 * b + size_t(4 * d + n / 2 + 16 * (n % 2))];
      }
}

// Q4_1: (d * q) + m.
template <class Lookup, class Out>
QT_AVX512 inline void q4_1(const uint8_t* src, size_t nb, Out& out) {
  const __m512 codes = iota16(0);
  for (size_t b = 0; b < nb; ++b, src += 20) {
    ggml_prefetch_ahead(src, 1);
    Lookup::run(src + 4, _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(half(src)), codes), _mm512_set1_ps(half(src + 2))),
                32 * b, out);
  }
}

// Q5_0 / Q5_1: the fifth bit of element j is bit j of the 32-bit qh; Q5_0 is d * (q - 16),
// Q5_1 (d * q) + m. Codes 0..15 in one table, 16..31 in the other.
template <bool kMin, class Out>
QT_AVX512 inline void q5(const uint8_t* src, size_t nb, Out& out) {
  constexpr size_t kBytes = kMin ? 24 : 22;
  const __m512i sixteen = _mm512_set1_epi32(16);
  const __m512 lo_codes = iota16(kMin ? 0 : -16), hi_codes = iota16(kMin ? 16 : 0);
  for (size_t b = 0; b < nb; ++b, src += kBytes) {
    ggml_prefetch_ahead(src, 1);
    const __m512 d = _mm512_set1_ps(half(src));
    __m512 t0 = _mm512_mul_ps(d, lo_codes), t1 = _mm512_mul_ps(d, hi_codes);
    if constexpr (kMin) {
      const __m512 m = _mm512_set1_ps(half(src + 2));
      t0 = _mm512_add_ps(t0, m);
      t1 = _mm512_add_ps(t1, m);
    }
    const uint8_t* p = src + (kMin ? 4 : 2);
    const uint32_t qh = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    const __m128i raw = load16(p + 4);
    const __m512i lo = _mm512_mask_or_epi32(low_nibbles(raw), __mmask16(qh & 0xffff), low_nibbles(raw), sixteen);
    const __m512i hi = _mm512_mask_or_epi32(high_nibbles(raw), __mmask16(qh >> 16), high_nibbles(raw), sixteen);
    out(32 * b, _mm512_permutex2var_ps(t0, lo, t1));
    out(32 * b + 16, _mm512_permutex2var_ps(t0, hi, t1));
  }
}

// Q8_0: q * d.
template <class Out>
QT_AVX512 inline void q8_0(const uint8_t* src, size_t nb, Out& out) {
  for (size_t b = 0; b < nb; ++b, src += 34) {
    ggml_prefetch_ahead(src, 1);
    const __m512 d = _mm512_set1_ps(half(src));
    out(32 * b, _mm512_mul_ps(to_f32(_mm512_cvtepi8_epi32(load16(src + 2))), d));
    out(32 * b + 16, _mm512_mul_ps(to_f32(_mm512_cvtepi8_epi32(load16(src + 18))), d));
  }
}

// Q4_K / Q5_K 6-bit scale and min of sub-block t (0..7), as scale_min_k4.
inline void scale_min_k4(int t, const uint8_t* s, int* sc, int* mn) {
  if (t < 4) {
    *sc = s[t] & 63;
    *mn = s[t + 4] & 63;
  } else {
    *sc = (s[t + 4] & 0xF) | ((s[t - 4] >> 6) << 4);
    *mn = (s[t + 4] >> 4) | ((s[t] >> 6) << 4);
  }
}

// A block's scales, computed into a small array, are read back one at a time as broadcast operands:
// a load (VBROADCASTSS from memory), where a broadcast from a register, or the VPERMD of a lane that
// GCC otherwise keeps in a register, takes the shuffle port the codes' lookups need. The barrier
// after the array is written (its address handed to it, so the array lives in memory) makes GCC
// read it back.
QT_AVX512 inline void read_back_from_memory(const void* array) { asm volatile("" : : "r"(array) : "memory"); }

// Q4_K / Q5_K: a block's 8 sub-block scales d * sc and mins dmin * mn.
struct QkScales {
  float dl[8], ml[8];
  QT_AVX512 QkScales(const uint8_t* scales, float d, float dmin) {
    for (int t = 0; t < 8; ++t) {
      int sc, mn;
      scale_min_k4(t, scales, &sc, &mn);
      dl[t] = d * float(sc), ml[t] = dmin * float(mn);
    }
    read_back_from_memory(this);
  }
};

// Q4_K / Q5_K sub-block t's values, (d * sc) * q - dmin * mn: codes 0..15 (lo_codes: iota16(0)) in
// t0, Q5_K's 16..31 (hi_codes) in t1 — for the decoder and the dot alike.
template <bool kFive>
QT_AVX512 inline void qk_tables(const QkScales& s, int t, __m512 lo_codes, __m512 hi_codes, __m512* t0, __m512* t1) {
  const __m512 dl = _mm512_set1_ps(s.dl[t]), ml = _mm512_set1_ps(s.ml[t]);
  *t0 = _mm512_sub_ps(_mm512_mul_ps(dl, lo_codes), ml);
  *t1 = kFive ? _mm512_sub_ps(_mm512_mul_ps(dl, hi_codes), ml) : *t0;
}

// Q4_K: 8 sub-blocks of 32 (qk_tables); Q5_K the same with a fifth bit (bit t of qh[l] for element
// l of sub-block t).
template <bool kFive, class Out>
QT_AVX512 inline void qk45(const uint8_t* src, size_t nb, Out& out) {
  constexpr size_t kBytes = kFive ? 176 : 144;
  const __m512 lo_codes = iota16(0), hi_codes = iota16(16);
  for (size_t b = 0; b < nb; ++b, src += kBytes) {
    ggml_prefetch_ahead(src, int(kBytes));
    const QkScales sc(src + 4, half(src), half(src + 2));
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + (kFive ? 48 : 16);
    for (int t = 0; t < 8; ++t) {
      __m512 t0, t1;
      qk_tables<kFive>(sc, t, lo_codes, hi_codes, &t0, &t1);
      for (int l = 0; l < 32; l += 16) {
        const __m128i raw = load16(qs + 32 * (t / 2) + l);
        __m512i q = t % 2 ? high_nibbles(raw) : low_nibbles(raw);
        __m512 w;
        if constexpr (kFive) {
          const __m512i h = _mm512_cvtepu8_epi32(load16(qh + l));
          q = _mm512_or_si512(
              q, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, unsigned(t)), _mm512_set1_epi32(1)), 4));
          w = _mm512_permutex2var_ps(t0, q, t1);
        } else {
          w = _mm512_permutexvar_ps(q, t0);
        }
        out(256 * b + 32 * size_t(t) + size_t(l), w);
      }
    }
  }
}

// Q4_K's and Q5_K's one-token dot in fewer shuffles, as NibblesShifted: a pair of
// sub-blocks' 32 code bytes (low nibbles: sub-block 2j, high: 2j + 1) broadcast to both 256-bit
// halves, the upper half shifted by 8 bits; shifts by 0, 4, 16, 20 then put nibbles (0, 2), (1, 3),
// (4, 6), (5, 7) of dword i % 8 in lane i's low bits — all low nibbles or all high ones, so one
// table (Q5_K: one pair of tables) a lookup. Nibble n of dword D is element l = 4D + n / 2 (+ 32 for
// odd n) of the pair (q4k_token_order). Q5_K's fifth bit, bit 2j + n % 2 of qh[l], is byte n / 2
// of qh's dword D too: qh broadcast the same way and rotated right by 8(n / 2) + n % 2 − 4 + 2j
// lands it on bit 4 of the lane, VPERMT2PS's table select.
constexpr int kQkStepNibble[4] = {0, 1, 4, 5};  // lanes 0–7's nibble at step s (lanes 8–15: + 2)

template <bool kFive>
QT_AVX512 inline void qk_shifted(const uint8_t* src, size_t nb, Dot& out) {
  constexpr size_t kBytes = kFive ? 176 : 144;
  static constexpr int kShift[4] = {0, 4, 16, 20};
  const __m512 lo_codes = iota16(0), hi_codes = iota16(16);
  const __m512i half_shift = _mm512_set_epi32(8, 8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i bit4 = _mm512_set1_epi32(0x10);
  __m512i rot[4];  // the rotation to bit 4 of step s's fifth bits, before + 2j
  for (int st = 0; st < 4; ++st) {
    const int lo = kQkStepNibble[st], hi = kQkStepNibble[st] + 2;
    rot[st] = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32((8 * (lo / 2) + lo % 2 - 4) & 31),
                                      _mm512_set1_epi32((8 * (hi / 2) + hi % 2 - 4) & 31));
  }
  for (size_t b = 0; b < nb; ++b, src += kBytes) {
    ggml_prefetch_ahead(src, int(kBytes));
    const QkScales sc(src + 4, half(src), half(src + 2));
    const uint8_t* qs = src + (kFive ? 48 : 16);
    [[maybe_unused]] __m512i qh;
    if constexpr (kFive) qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 16)));
    for (int j = 0; j < 4; ++j) {
      __m512 t0[2], t1[2];
      for (int h = 0; h < 2; ++h) qk_tables<kFive>(sc, 2 * j + h, lo_codes, hi_codes, &t0[h], &t1[h]);
      const __m512i v = _mm512_srlv_epi32(
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j))), half_shift);
      const size_t at = 256 * b + 64 * size_t(j);
      for (int st = 0; st < 4; ++st) {
        const __m512i idx = _mm512_srli_epi32(v, unsigned(kShift[st]));
        const int h = st % 2;
        if constexpr (kFive) {
          const __m512i fifth = _mm512_rorv_epi32(qh, _mm512_add_epi32(rot[st], _mm512_set1_epi32(2 * j)));
          const __m512i i5 = _mm512_ternarylogic_epi32(idx, fifth, bit4, 0xd8);  // idx's bit 4 from fifth
          out(at + 16 * size_t(st), _mm512_permutex2var_ps(t0[h], i5, t1[h]));
        } else {
          out(at + 16 * size_t(st), _mm512_permutexvar_ps(idx, t0[h]));
        }
      }
    }
  }
}

// x in qk_shifted's order: out[256b + 64j + 16s + i] = x[256b + 64j + element of nibble
// (0, 1, 4, 5)[s] + (i < 8 ? 0 : 2) of dword i % 8].
void q4k_token_order(const float* x, size_t nb, float* out) {
  for (size_t p = 0; p < 4 * nb; ++p)  // pairs of sub-blocks
    for (int s = 0; s < 4; ++s)
      for (int i = 0; i < 16; ++i) {
        const int n = kQkStepNibble[s] + (i < 8 ? 0 : 2), dw = i % 8;
        out[64 * p + 16 * size_t(s) + size_t(i)] = x[64 * p + size_t(4 * dw + n / 2 + 32 * (n % 2))];
      }
}

// Q6_K: (d * scale) * (q - 32), 16 sub-blocks of 16 with int8 scales. Elements 128h + 32k + 16hf + l
// take the low (k < 2) or high nibble of ql[64h + 32(k % 2) + 16hf + l] and bits 2k, 2k + 1 of
// qh[32h + 16hf + l]: the four k of one (h, hf) read the same 16 qh bytes and two 16-byte ql runs,
// so the 6-bit codes of all four are put together as bytes (shifts of 16-bit lanes, each byte's own
// bits kept by the masks) and q - 32 formed there, then widened once each.
template <class Out>
QT_AVX512 inline void q6_k(const uint8_t* src, size_t nb, Out& out) {
  const __m128i m4 = _mm_set1_epi8(0x0f), m30 = _mm_set1_epi8(0x30), b32 = _mm_set1_epi8(32);
  auto code = [&](__m128i nibbles, __m128i high2) {  // (nibbles & 15 | high2 & 0x30) - 32, as fp32
    return to_f32(
        _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_or_si128(_mm_and_si128(nibbles, m4), _mm_and_si128(high2, m30)), b32)));
  };
  for (size_t b = 0; b < nb; ++b, src += 210) {
    ggml_prefetch_ahead(src, 210);
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    alignas(64) float ds[16];  // the 16 scales d * sc, as one vector (read_back_from_memory)
    _mm512_store_ps(ds,
                    _mm512_mul_ps(_mm512_set1_ps(half(src + 208)), to_f32(_mm512_cvtepi8_epi32(load16(src + 192)))));
    read_back_from_memory(ds);
    for (int h = 0; h < 2; ++h) {
      __m512 q[2][4];
      for (int hf = 0; hf < 2; ++hf) {
        const __m128i a = load16(ql + 64 * h + 16 * hf), c = load16(ql + 64 * h + 32 + 16 * hf);
        const __m128i hb = load16(qh + 32 * h + 16 * hf);
        q[hf][0] = code(a, _mm_slli_epi16(hb, 4));
        q[hf][1] = code(c, _mm_slli_epi16(hb, 2));
        q[hf][2] = code(_mm_srli_epi16(a, 4), hb);
        q[hf][3] = code(_mm_srli_epi16(c, 4), _mm_srli_epi16(hb, 2));
      }
      for (int k = 0; k < 4; ++k)  // in the elements' order: a dot's two accumulators alternate
        for (int hf = 0; hf < 2; ++hf)
          out(256 * b + size_t(128 * h + 32 * k + 16 * hf),
              _mm512_mul_ps(_mm512_set1_ps(ds[8 * h + 2 * k + hf]), q[hf][k]));
    }
  }
}

// IQ4_XS: (d * (ls - 32)) * kvalues[q] per sub-block of 32, ls 6 bits (scales_l nibble, scales_h pair).
template <class Out>
QT_AVX512 inline void iq4_xs(const uint8_t* src, size_t nb, Out& out) {
  const __m512 grid = iq4nl_grid();
  for (size_t b = 0; b < nb; ++b, src += 136) {
    ggml_prefetch_ahead(src, 136);
    const float d = half(src);
    const int sh = src[2] | src[3] << 8;
    float dl[8];  // the sub-blocks' scales (read_back_from_memory)
    for (int ib = 0; ib < 8; ++ib)
      dl[ib] = d * float((((src[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | ((sh >> (2 * ib)) & 3) << 4) - 32);
    read_back_from_memory(dl);
    for (int ib = 0; ib < 8; ++ib)
      NibblesInOrder::run(src + 8 + 16 * ib, _mm512_mul_ps(_mm512_set1_ps(dl[ib]), grid), 256 * b + 32 * size_t(ib),
                          out);
  }
}

// Q2_K: (d * (sc & 15)) * q - dmin * (sc >> 4); Q3_K: (d * (sc - 32)) * q, q = low 2 bits - (hmask
// bit set ? 0 : 4). Sub-block 8h + 2j + half holds elements 128h + 32j + 16·half + l, l < 16: its
// codes (qs[32h + 16·half + l] >> 2j) & 3 (Q3_K: + 4 · bit 4h + j of hmask[16·half + l]) index the
// sub-block's 4 (8) values. A block's 16 sub-block scales are computed as one vector, and one
// 16-value table holds the values of 4 (Q3_K: 2) sub-blocks, each code offset to its sub-block's
// slots: a broadcast per sub-block was the walker's busiest shuffle-port work. The codes are formed
// as bytes (128-bit shifts and masks, the hmask bit as a byte test's mask) and widened once for the
// lookup.
template <bool kQ3, class Out>
QT_AVX512 inline void q23_k(const uint8_t* src, size_t nb, Out& out) {
  constexpr int kVals = kQ3 ? 8 : 4, kPer = 16 / kVals;  // values a sub-block indexes; sub-blocks a table holds
  const __m128i three = _mm_set1_epi8(3), four = _mm_set1_epi8(4);
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i slot = _mm512_srli_epi32(lane, kQ3 ? 3 : 2);  // the table's sub-block of each lane
  const __m512 code = to_f32(_mm512_sub_epi32(_mm512_and_si512(lane, _mm512_set1_epi32(kVals - 1)),
                                              _mm512_set1_epi32(kQ3 ? 4 : 0)));  // the lane's q
  for (size_t b = 0; b < nb; ++b, src += kQ3 ? 110 : 84) {
    ggml_prefetch_ahead(src, kQ3 ? 110 : 84);
    const uint8_t* qs = src + (kQ3 ? 32 : 16);
    const float d = half(src + (kQ3 ? 108 : 80));
    __m512 dl, ml = _mm512_setzero_ps();  // per sub-block: its scale (and Q2_K's min)
    if constexpr (kQ3) {
      const uint8_t* sc = src + 96;
      alignas(64) int32_t s6[16];
      for (int sb = 0; sb < 16; ++sb)
        s6[sb] = (((sb < 8 ? sc[sb] : sc[sb - 8] >> 4) & 0xF) | ((sc[8 + sb % 4] >> (2 * (sb / 4))) & 3) << 4) - 32;
      dl = _mm512_mul_ps(_mm512_set1_ps(d), to_f32(_mm512_load_si512(s6)));
    } else {
      const __m512i sc = _mm512_cvtepu8_epi32(load16(src));
      dl = _mm512_mul_ps(_mm512_set1_ps(d), to_f32(_mm512_and_si512(sc, _mm512_set1_epi32(0xF))));
      ml = _mm512_mul_ps(_mm512_set1_ps(half(src + 82)), to_f32(_mm512_srli_epi32(sc, 4)));
    }
    const __m128i hm[2] = {load16(src), load16(src + 16)};  // Q3_K's hmask (unread for Q2_K)
    __m512 table = _mm512_setzero_ps();
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int hf = 0; hf < 2; ++hf) {
          const int sb = 8 * h + 2 * j + hf;  // in loop order
          if (sb % kPer == 0) {
            const __m512i at = _mm512_add_epi32(slot, _mm512_set1_epi32(sb));
            table = _mm512_mul_ps(_mm512_permutexvar_ps(at, dl), code);
            if constexpr (!kQ3) table = _mm512_sub_ps(table, _mm512_permutexvar_ps(at, ml));
          }
          __m128i q = _mm_and_si128(_mm_srli_epi16(load16(qs + 32 * h + 16 * hf), 2 * j), three);
          if constexpr (kQ3)
            q = _mm_mask_add_epi8(q, _mm_test_epi8_mask(hm[hf], _mm_set1_epi8(char(1 << (4 * h + j)))), q, four);
          q = _mm_add_epi8(q, _mm_set1_epi8(char(sb % kPer * kVals)));  // this sub-block's slots
          out(256 * b + size_t(128 * h + 32 * j + 16 * hf), _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(q), table));
        }
  }
}

// A walker as a decoder and as a dot product.
template <void (*Walk)(const uint8_t*, size_t, Store&)>
QT_AVX512 void decode(const uint8_t* src, float* dst, size_t nb) {
  Store s{dst};
  Walk(src, nb, s);
}
template <void (*Walk)(const uint8_t*, size_t, Dot&)>
QT_AVX512 float dot(const uint8_t* src, const float* x, size_t nb) {
  Dot d{x, _mm512_setzero_ps(), _mm512_setzero_ps()};
  Walk(src, nb, d);
  return _mm512_reduce_add_ps(_mm512_add_ps(d.acc0, d.acc1));
}

bool has_avx512() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512vl && f.f16c && f.fma;
}

// Each walker as a decoder and as a dot product, one row a type.
struct Kernels {
  GgmlType type;
  GgmlDecodeFn decode;
  GgmlDotFn dot;
  GgmlTokenOrderFn order = nullptr;  // the order dot reads x in, where not the row's
};

const Kernels* find(uint32_t type) {
  static const Kernels kRows[] = {
      {GgmlType::Q4_0, decode<d_times_value<false, NibblesInOrder, Store>>,
       dot<d_times_value<false, NibblesShifted, Dot>>, nibble_token_order},
      {GgmlType::Q4_1, decode<q4_1<NibblesInOrder, Store>>, dot<q4_1<NibblesShifted, Dot>>, nibble_token_order},
      {GgmlType::Q5_0, decode<q5<false, Store>>, dot<q5<false, Dot>>},
      {GgmlType::Q5_1, decode<q5<true, Store>>, dot<q5<true, Dot>>},
      {GgmlType::Q8_0, decode<q8_0<Store>>, dot<q8_0<Dot>>},
      {GgmlType::Q4_K, decode<qk45<false, Store>>, dot<qk_shifted<false>>, q4k_token_order},
      {GgmlType::Q5_K, decode<qk45<true, Store>>, dot<qk_shifted<true>>, q4k_token_order},
      {GgmlType::Q6_K, decode<q6_k<Store>>, dot<q6_k<Dot>>},
      {GgmlType::IQ4_NL, decode<d_times_value<true, NibblesInOrder, Store>>,
       dot<d_times_value<true, NibblesShifted, Dot>>, nibble_token_order},
      {GgmlType::IQ4_XS, decode<iq4_xs<Store>>, dot<iq4_xs<Dot>>},
      {GgmlType::Q2_K, decode<q23_k<false, Store>>, dot<q23_k<false, Dot>>},
      {GgmlType::Q3_K, decode<q23_k<true, Store>>, dot<q23_k<true, Dot>>},
  };
  if (!has_avx512()) return nullptr;
  for (const Kernels& k : kRows)
    if (uint32_t(k.type) == type) return &k;
  return nullptr;
}

}  // namespace

GgmlDecodeFn ggml_decoder_avx512(uint32_t type) {
  const Kernels* k = find(type);
  return k ? k->decode : nullptr;
}

GgmlDotFn ggml_dot_avx512(uint32_t type) {
  const Kernels* k = find(type);
  return k ? k->dot : nullptr;
}

GgmlTokenOrderFn ggml_dot_token_order(uint32_t type) {
  const Kernels* k = find(type);
  return k ? k->order : nullptr;
}

}  // namespace qt::kernels
