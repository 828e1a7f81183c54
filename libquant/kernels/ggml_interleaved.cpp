// ggml_interleaved (ggml_interleaved.h). Block layouts: ggml-common.h's block_q4_0 (d, qs[16]),
// block_q4_1 (d, m, qs[16]), block_q5_0 (d, qh[4], qs[16]), block_q5_1 (d, m, qh[4], qs[16]),
// block_iq4_nl (d, qs[16]), block_mxfp4 (e, qs[16]), block_q8_0 (d, qs[32] signed), block_q2_K (scales[16], qs[64], d, dmin),
// block_q3_K (hmask[32], qs[64], scales[12], d), block_iq4_xs (d, scales_h, scales_l[4], qs[128]), block_q4_K (d, dmin, scales[12], qs[128])
// block_q5_K (d, dmin, scales[12], qh[32], qs[128]) and block_q6_K (ql[128], qh[64], scales[16], d), as formats/ggml_quants_legacy.cpp and
// ggml_quants_k.cpp read them.
//
// Each type is a struct: its group block's size, pack/unpack of one row's block, and the GEMV in
// kParts steps over consecutive byte ranges of a group block (part p covers [begin(p), begin(p+1))),
// with a per-block State that finish() adds into the lanes' sums. The driver walks up to four groups
// side by side one part at a time, so every stream advances evenly.
#include "libquant/kernels/ggml_interleaved.h"

#include <immintrin.h>

#include <cstring>

#include "formats/ggml_blocks.h"
#include "formats/ggml_quants_common.h"

namespace qt::kernels {
namespace {

// GCC 12 reports its own AVX-512 intrinsics' undefined-vector idiom (cvtepu8, cvtepi32) as
// uninitialised once inlined into the kernels below.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define QT_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))

QT_VNNI inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
QT_VNNI inline __m512 half16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
QT_VNNI inline __m512 u8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
QT_VNNI inline __m512 i8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Copies `bytes` between a row's block and lane i of a group's vector of 16 such pieces.
inline void to_lane(uint8_t* vec, int i, const uint8_t* src, size_t bytes) {
  if (src)
    std::memcpy(vec + bytes * size_t(i), src, bytes);
  else
    std::memset(vec + bytes * size_t(i), 0, bytes);
}
inline void from_lane(const uint8_t* vec, int i, uint8_t* dst, size_t bytes) {
  std::memcpy(dst, vec + bytes * size_t(i), bytes);
}

// The legacy types (blocks of 32): 16 fp16 d (MXFP4: 16 E8M0 exponents) | Q4_1, Q5_1: 16 fp16 m |
// Q5_0, Q5_1: the rows' fifth bits, 4 bytes a row rearranged (fifth_bits) | the code words.
// VPDPBUSD sums unsigned codes × signed token values exactly in int32 lanes (Q8_0's codes made
// unsigned by + 128, IQ4_NL's and MXFP4's grid values looked up + 128); the offset (Q4_0's 8, Q5_0's
// 16, the others' 128) comes back through the token block's sum; then d·dx in fp32, and Q4_1/Q5_1
// add m·dx·Σq.
enum class Legacy { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4 };

// A 16-value int8 grid (ggml::kIq4nl, ggml::kMxfp4) + 128 as unsigned bytes.
struct GridU8 {
  uint8_t v[16];
  constexpr explicit GridU8(const int8_t* grid) : v{} {
    for (int i = 0; i < 16; ++i) v[i] = uint8_t(grid[i] + 128);
  }
};
constexpr GridU8 kIq4nlU8(ggml::kIq4nl), kMxfp4U8(ggml::kMxfp4);

// MXFP4's d for 16 rows' E8M0 bytes: 2^(e − 128), the two smallest as denormals (ggml-impl.h
// ggml_e8m0_to_fp32_half: bits (e − 1) << 23, or 0x00200000 << e below 2).
QT_VNNI inline __m512 e8m0_half16(const uint8_t* p) {
  const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  return _mm512_castsi512_ps(
      _mm512_mask_blend_epi32(small, normal, _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e)));
}

// A Q5 row's qh (bit j: the fifth bit of element j) as the words want it: byte b holds at bit t the
// fifth bit of element 4t + b (word t's low nibble b) and at bit 4 + t that of element 16 + 4t + b
// (its high nibble b), so word t moves them to bit 4 with one shift and a mask.
inline uint32_t fifth_bits(uint32_t qh) {
  uint32_t p = 0;
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 4; ++t)
      p |= ((qh >> (4 * t + b)) & 1u) << (8 * b + t) | ((qh >> (16 + 4 * t + b)) & 1u) << (8 * b + 4 + t);
  return p;
}
inline uint32_t qh_of(uint32_t p) {
  uint32_t qh = 0;
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 4; ++t)
      qh |= ((p >> (8 * b + t)) & 1u) << (4 * t + b) | ((p >> (8 * b + 4 + t)) & 1u) << (16 + 4 * t + b);
  return qh;
}

template <Legacy kT>
struct LegacyKernel {
  static constexpr bool kMin = kT == Legacy::Q4_1 || kT == Legacy::Q5_1;
  static constexpr bool kFifth = kT == Legacy::Q5_0 || kT == Legacy::Q5_1;
  static constexpr bool kGrid = kT == Legacy::IQ4_NL || kT == Legacy::MXFP4;
  static constexpr size_t kField = kT == Legacy::MXFP4 ? 1 : 2;                      // d: fp16, or E8M0
  static constexpr size_t kHeader = kMin ? 4 : kField;                               // d (and m)
  static constexpr int kWords = kT == Legacy::Q8_0 ? 8 : 4;                          // 4 code bytes each
  static constexpr size_t kBlock = kHeader + (kFifth ? 4 : 0) + 4 * size_t(kWords);  // a row's block
  static constexpr size_t kQhAt = 16 * kHeader, kWordsAt = kQhAt + (kFifth ? 64 : 0);
  static constexpr size_t kGroupBlock = 16 * kBlock;
  static constexpr int kParts = 1;
  static constexpr size_t begin(int p) { return p == 0 ? 0 : kGroupBlock; }
  static constexpr int32_t kOffset = kT == Legacy::Q4_0 ? 8 : kT == Legacy::Q5_0 ? 16 : kMin ? 0 : 128;

  static void pack(const uint8_t* blk, int i, uint8_t* o) {  // blk: null for a padding row
    for (size_t h = 0; h < kHeader; h += kField) to_lane(o + 16 * h, i, blk ? blk + h : nullptr, kField);
    if constexpr (kFifth) {
      uint32_t qh = 0;
      if (blk) std::memcpy(&qh, blk + kHeader, 4);
      const uint32_t p = fifth_bits(qh);
      std::memcpy(o + kQhAt + 4 * size_t(i), &p, 4);
    }
    const size_t qs = kHeader + (kFifth ? 4 : 0);
    for (int t = 0; t < kWords; ++t) to_lane(o + kWordsAt + 64 * t, i, blk ? blk + qs + 4 * t : nullptr, 4);
  }
  static void unpack(const uint8_t* g, int i, uint8_t* blk) {
    for (size_t h = 0; h < kHeader; h += kField) from_lane(g + 16 * h, i, blk + h, kField);
    if constexpr (kFifth) {
      uint32_t p;
      std::memcpy(&p, g + kQhAt + 4 * size_t(i), 4);
      const uint32_t qh = qh_of(p);
      std::memcpy(blk + kHeader, &qh, 4);
    }
    const size_t qs = kHeader + (kFifth ? 4 : 0);
    for (int t = 0; t < kWords; ++t) from_lane(g + kWordsAt + 64 * t, i, blk + qs + 4 * t, 4);
  }

  struct State {};
  QT_VNNI static void part(const uint8_t* g, const GgmlTokenI8& x, size_t j, int, State&, __m512& acc) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const int8_t* q = x.q.data() + 32 * j;
    __m512i a0 = _mm512_set1_epi32(-kOffset * int32_t(x.sum32[j])), a1 = _mm512_setzero_si512();
    const uint8_t* words = g + kWordsAt;
    if constexpr (kT == Legacy::Q8_0) {
      const __m512i sign = _mm512_set1_epi8(char(0x80));
      for (int t = 0; t < 8; t += 2) {
        a0 = _mm512_dpbusd_epi32(a0, _mm512_xor_si512(_mm512_loadu_si512(words + 64 * t), sign), broadcast4(q + 4 * t));
        a1 = _mm512_dpbusd_epi32(a1, _mm512_xor_si512(_mm512_loadu_si512(words + 64 * t + 64), sign),
                                 broadcast4(q + 4 * t + 4));
      }
    } else {
      [[maybe_unused]] __m512i fifth, grid;
      if constexpr (kFifth) fifth = _mm512_loadu_si512(g + kQhAt);
      if constexpr (kGrid)
        grid = _mm512_broadcast_i32x4(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(kT == Legacy::MXFP4 ? kMxfp4U8.v : kIq4nlU8.v)));
      for (int t = 0; t < 4; ++t) {
        const __m512i c = _mm512_loadu_si512(words + 64 * t);
        __m512i cl = _mm512_and_si512(c, low4), ch = _mm512_and_si512(_mm512_srli_epi16(c, 4), low4);
        if constexpr (
            kFifth) {  // bit t (low) and 4 + t (high) of each byte to bit 4; 16-bit shifts keep each byte's own bit
          const __m512i bit4 = _mm512_set1_epi8(0x10);
          cl = _mm512_or_si512(cl, _mm512_and_si512(_mm512_slli_epi16(fifth, 4 - t), bit4));
          ch = _mm512_or_si512(ch, _mm512_and_si512(_mm512_srli_epi16(fifth, t), bit4));
        }
        if constexpr (kGrid) {
          cl = _mm512_shuffle_epi8(grid, cl);
          ch = _mm512_shuffle_epi8(grid, ch);
        }
        a0 = _mm512_dpbusd_epi32(a0, cl, broadcast4(q + 4 * t));
        a1 = _mm512_dpbusd_epi32(a1, ch, broadcast4(q + 16 + 4 * t));
      }
    }
    const __m512 dx = _mm512_set1_ps(x.d[j]);
    const __m512 d = kT == Legacy::MXFP4 ? e8m0_half16(g) : half16(g);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)), _mm512_mul_ps(d, dx), acc);
    if constexpr (kMin) acc = _mm512_fmadd_ps(half16(g + 32), _mm512_set1_ps(x.d[j] * x.sum32[j]), acc);
  }
  QT_VNNI static void finish(const uint8_t*, State&, __m512&) {}
};

// Q4_K / Q5_K: 16 fp16 d | 16 fp16 dmin | the sub-blocks' 6-bit scales, then minimums, a byte each
// ([sub-block][row]; ggml's get_scale_min_k4 unpacks them) | Q5_K: 8 words of qh | 4 parts of 8 code
// words: part p holds bytes 32p..32p+31 of each row's qs, low nibbles sub-block 2p, high 2p+1 (Q5_K:
// their fifth bits are bits 2p and 2p+1 of qh, as dequantize_row_q5_K reads them). w = d·sc·q -
// dmin·mn: Σ w·x = d·Σ_s sc_s·dx_s·(q·xq)_s - dmin·Σ_s mn_s·dx_s·Σxq_s.
template <bool kFifthBit>
struct QKKernel {
  static constexpr size_t kBlock = kFifthBit ? 176 : 144, kRowQs = kFifthBit ? 48 : 16;  // a row's block, its qs
  static constexpr size_t kScales = 64, kMins = 192, kQh = 320;
  static constexpr size_t kCodes = kFifthBit ? kQh + 512 : kQh, kGroupBlock = kCodes + 16 * 128;
  static constexpr int kParts = 4;
  static constexpr size_t begin(int p) { return p == 0 ? 0 : kCodes + 512 * size_t(p); }

  static void pack(const uint8_t* blk, int i, uint8_t* o) {
    to_lane(o, i, blk, 2);
    to_lane(o + 32, i, blk ? blk + 2 : nullptr, 2);
    const uint8_t* s = blk ? blk + 4 : nullptr;
    for (int t = 0; t < 4; ++t) {
      o[kScales + 16 * t + i] = s ? uint8_t(s[t] & 63) : 0;
      o[kMins + 16 * t + i] = s ? uint8_t(s[t + 4] & 63) : 0;
      o[kScales + 16 * (t + 4) + i] = s ? uint8_t((s[t + 8] & 0xF) | ((s[t] >> 6) << 4)) : 0;
      o[kMins + 16 * (t + 4) + i] = s ? uint8_t((s[t + 8] >> 4) | ((s[t + 4] >> 6) << 4)) : 0;
    }
    if constexpr (kFifthBit)
      for (int w = 0; w < 8; ++w) to_lane(o + kQh + 64 * w, i, blk ? blk + 16 + 4 * w : nullptr, 4);
    for (int w = 0; w < 32; ++w) to_lane(o + kCodes + 64 * w, i, blk ? blk + kRowQs + 4 * w : nullptr, 4);
  }
  static void unpack(const uint8_t* g, int i, uint8_t* blk) {
    from_lane(g, i, blk, 2);
    from_lane(g + 32, i, blk + 2, 2);
    uint8_t* s = blk + 4;
    for (int t = 0; t < 4; ++t) {  // the packing above, inverted (every value < 64)
      const uint8_t sc = g[kScales + 16 * t + i], mn = g[kMins + 16 * t + i];
      const uint8_t sc4 = g[kScales + 16 * (t + 4) + i], mn4 = g[kMins + 16 * (t + 4) + i];
      s[t] = uint8_t(sc | (sc4 >> 4) << 6);
      s[t + 4] = uint8_t(mn | (mn4 >> 4) << 6);
      s[t + 8] = uint8_t((sc4 & 0xF) | (mn4 & 0xF) << 4);
    }
    if constexpr (kFifthBit)
      for (int w = 0; w < 8; ++w) from_lane(g + kQh + 64 * w, i, blk + 16 + 4 * w, 4);
    for (int w = 0; w < 32; ++w) from_lane(g + kCodes + 64 * w, i, blk + kRowQs + 4 * w, 4);
  }

  struct State {
    __m512 scaled, mins;
  };
  QT_VNNI static void part(const uint8_t* g, const GgmlTokenI8& x, size_t j, int p, State& st, __m512&) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), bit0 = _mm512_set1_epi8(0x01);
    const int8_t* q = x.q.data() + 256 * j + 64 * p;
    const float* dx = x.d.data() + 8 * j;
    const float* sum = x.sum32.data() + 8 * j;
    if (p == 0) st.scaled = st.mins = _mm512_setzero_ps();
    const __m128i shift_lo = _mm_cvtsi32_si128(2 * p), shift_hi = _mm_cvtsi32_si128(2 * p + 1);
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    for (int t = 0; t < 8; ++t) {
      const __m512i c = _mm512_loadu_si512(g + kCodes + 512 * p + 64 * t);
      __m512i cl = _mm512_and_si512(c, low4), ch = _mm512_and_si512(_mm512_srli_epi16(c, 4), low4);
      if constexpr (kFifthBit) {  // bit s of each qh byte to bit 4 (16-bit shifts; the masks keep each byte's own bit)
        const __m512i qh = _mm512_loadu_si512(g + kQh + 64 * t);
        cl = _mm512_or_si512(cl, _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(qh, shift_lo), bit0), 4));
        ch = _mm512_or_si512(ch, _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(qh, shift_hi), bit0), 4));
      }
      lo = _mm512_dpbusd_epi32(lo, cl, broadcast4(q + 4 * t));
      hi = _mm512_dpbusd_epi32(hi, ch, broadcast4(q + 32 + 4 * t));
    }
    const int s0 = 2 * p, s1 = 2 * p + 1;
    st.scaled = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo),
                                _mm512_mul_ps(u8x16(g + kScales + 16 * s0), _mm512_set1_ps(dx[s0])), st.scaled);
    st.scaled = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi),
                                _mm512_mul_ps(u8x16(g + kScales + 16 * s1), _mm512_set1_ps(dx[s1])), st.scaled);
    st.mins = _mm512_fmadd_ps(u8x16(g + kMins + 16 * s0), _mm512_set1_ps(dx[s0] * sum[s0]), st.mins);
    st.mins = _mm512_fmadd_ps(u8x16(g + kMins + 16 * s1), _mm512_set1_ps(dx[s1] * sum[s1]), st.mins);
  }
  QT_VNNI static void finish(const uint8_t* g, State& st, __m512& acc) {
    acc = _mm512_fnmadd_ps(st.mins, half16(g + 32), _mm512_fmadd_ps(st.scaled, half16(g), acc));
  }
};

// Q6_K: 16 fp16 d | the 16 int8 sub-block scales, [sub-block][row] | 4 parts (h, half) of 4 steps c,
// each three words: bytes 4c'..4c'+3 (c' = 4·half + c) of ql[64h..], of ql[64h + 32..] and of
// qh[32h..]. Element 128h + 32k + l (l < 32) has its low 4 bits in ql[64h + 32(k%2) + l] >> 4(k/2)
// and its high 2 in qh[32h + l] >> 2k (ggml's dequantize_row_q6_K); w = d·sc·(q - 32), sub-blocks of 16.
struct Q6KKernel {
  static constexpr size_t kBlock = 210, kScales = 32, kCodes = kScales + 256, kPart = 12 * 64;
  static constexpr size_t kGroupBlock = kCodes + 4 * kPart;  // 16 × 210: the rows' size
  static constexpr int kParts = 4;
  static constexpr size_t begin(int p) { return p == 0 ? 0 : kCodes + kPart * size_t(p); }
  // The group offset of step c of part p's word w (0: ql low half, 1: ql high half, 2: qh), and
  // the row's bytes it holds.
  static constexpr size_t word_at(int p, int c, int w) {
    return kCodes + kPart * size_t(p) + 192 * size_t(c) + 64 * size_t(w);
  }
  static constexpr size_t row_at(int p, int c, int w) {
    const int h = p / 2, cc = 4 * (p % 2) + c;
    return w == 2 ? 128 + 32 * h + 4 * cc : 64 * h + 32 * w + 4 * cc;
  }

  static void pack(const uint8_t* blk, int i, uint8_t* o) {
    to_lane(o, i, blk ? blk + 208 : nullptr, 2);
    for (int sb = 0; sb < 16; ++sb) o[kScales + 16 * sb + i] = blk ? blk[192 + sb] : 0;
    for (int p = 0; p < 4; ++p)
      for (int c = 0; c < 4; ++c)
        for (int w = 0; w < 3; ++w) to_lane(o + word_at(p, c, w), i, blk ? blk + row_at(p, c, w) : nullptr, 4);
  }
  static void unpack(const uint8_t* g, int i, uint8_t* blk) {
    from_lane(g, i, blk + 208, 2);
    for (int sb = 0; sb < 16; ++sb) blk[192 + sb] = g[kScales + 16 * sb + i];
    for (int p = 0; p < 4; ++p)
      for (int c = 0; c < 4; ++c)
        for (int w = 0; w < 3; ++w) from_lane(g + word_at(p, c, w), i, blk + row_at(p, c, w), 4);
  }

  struct State {
    __m512 f;
  };
  QT_VNNI static void part(const uint8_t* g, const GgmlTokenI8& x, size_t j, int p, State& st, __m512&) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
    const int h = p / 2, half = p % 2;  // elements l < 16, then l ≥ 16: sub-blocks 8h + 2k + half
    const int8_t* q = x.q.data() + 256 * j + 128 * h + 16 * half;
    const float* dx = x.d.data() + 8 * j;
    const int32_t* sum16 = x.sum16.data() + 16 * j;
    if (p == 0) st.f = _mm512_setzero_ps();
    __m512i a[4];
    for (int k = 0; k < 4; ++k) a[k] = _mm512_set1_epi32(-32 * sum16[8 * h + 2 * k + half]);
    for (int c = 0; c < 4; ++c) {
      const __m512i ql0 = _mm512_loadu_si512(g + word_at(p, c, 0));
      const __m512i ql1 = _mm512_loadu_si512(g + word_at(p, c, 1));
      const __m512i qh = _mm512_loadu_si512(g + word_at(p, c, 2));
      const __m512i code[4] = {
          _mm512_or_si512(_mm512_and_si512(ql0, low4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), bits45)),
          _mm512_or_si512(_mm512_and_si512(ql1, low4), _mm512_and_si512(_mm512_slli_epi16(qh, 2), bits45)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), low4), _mm512_and_si512(qh, bits45)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), low4),
                          _mm512_and_si512(_mm512_srli_epi16(qh, 2), bits45))};
      for (int k = 0; k < 4; ++k) a[k] = _mm512_dpbusd_epi32(a[k], code[k], broadcast4(q + 32 * k + 4 * c));
    }
    for (int k = 0; k < 4; ++k) {
      const int sb = 8 * h + 2 * k + half;
      st.f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[k]),
                             _mm512_mul_ps(i8x16(g + kScales + 16 * sb), _mm512_set1_ps(dx[sb / 2])), st.f);
    }
  }
  QT_VNNI static void finish(const uint8_t* g, State& st, __m512& acc) { acc = _mm512_fmadd_ps(st.f, half16(g), acc); }
};

// Q2_K / Q3_K: 2-bit codes in sub-blocks of 16 (Q3_K: a third bit in hmask). Element 128h + 32j +
// 16·half + l (l < 16) is (qs[32h + 16·half + l] >> 2j) & 3 of sub-block 8h + 2j + half; Q3_K's third
// bit is bit 4h + j of hmask[16·half + l] (ggml's dequantize_row_q2_K / q3_K). A group block:
// Q2_K: 16 fp16 d | 16 fp16 dmin | the sub-blocks' scale bytes (scale | min << 4), [sub-block][row] |
// Q3_K: 16 fp16 d | the sub-blocks' 6-bit scales - 32 as int8, [sub-block][row] (+4 bytes a row:
// +3.6%) | 8 words of hmask, [half][c] | both: 4 parts (h, half) of 4 code words c, bytes 4c..4c+3
// of the row's qs[32h + 16·half ..]: each word feeds the four sub-blocks j at shifts 2j.
// Q2_K: w = d·sc·q - dmin·mn; Q3_K: w = d·sc·(u - 4), u = q | bit << 2 unsigned.
template <bool kQ3>
struct LowBitKKernel {
  static constexpr size_t kBlock = kQ3 ? 110 : 84;  // a row's block
  static constexpr size_t kRowQs = kQ3 ? 32 : 16;   // where its qs start
  static constexpr size_t kSc = kQ3 ? 32 : 64, kHm = kSc + 256, kQs = kQ3 ? kHm + 512 : kSc + 256;
  static constexpr size_t kGroupBlock = kQs + 1024;
  static constexpr int kParts = 4;
  static constexpr size_t begin(int p) { return p == 0 ? 0 : kQs + 256 * size_t(p); }

  // Q3_K's 12 scale bytes <-> its 16 6-bit scales (dequantize_row_q3_K's unpacking and its inverse).
  static void q3_scales(const uint8_t* b, int* s) {
    for (int k = 0; k < 16; ++k)
      s[k] = ((k < 8 ? b[k] : b[k - 8] >> 4) & 0xF) | ((b[8 + k % 4] >> (2 * (k / 4))) & 3) << 4;
  }
  static void q3_bytes(const int* s, uint8_t* b) {
    for (int i = 0; i < 8; ++i) b[i] = uint8_t((s[i] & 0xF) | (s[i + 8] & 0xF) << 4);
    for (int i = 0; i < 4; ++i)
      b[8 + i] = uint8_t((s[i] >> 4) | (s[4 + i] >> 4) << 2 | (s[8 + i] >> 4) << 4 | (s[12 + i] >> 4) << 6);
  }

  static void pack(const uint8_t* blk, int i, uint8_t* o) {
    if constexpr (kQ3) {
      to_lane(o, i, blk ? blk + 108 : nullptr, 2);
      int sc[16] = {};
      if (blk) q3_scales(blk + 96, sc);
      for (int sb = 0; sb < 16; ++sb) o[kSc + 16 * sb + i] = blk ? uint8_t(int8_t(sc[sb] - 32)) : 0;
      for (int w = 0; w < 8; ++w) to_lane(o + kHm + 64 * w, i, blk ? blk + 4 * w : nullptr, 4);
    } else {
      to_lane(o, i, blk ? blk + 80 : nullptr, 2);
      to_lane(o + 32, i, blk ? blk + 82 : nullptr, 2);
      for (int sb = 0; sb < 16; ++sb) o[kSc + 16 * sb + i] = blk ? blk[sb] : 0;
    }
    for (int w = 0; w < 16; ++w) to_lane(o + kQs + 64 * w, i, blk ? blk + kRowQs + 4 * w : nullptr, 4);
  }
  static void unpack(const uint8_t* g, int i, uint8_t* blk) {
    if constexpr (kQ3) {
      from_lane(g, i, blk + 108, 2);
      int sc[16];
      for (int sb = 0; sb < 16; ++sb) sc[sb] = int(int8_t(g[kSc + 16 * sb + i])) + 32;
      q3_bytes(sc, blk + 96);
      for (int w = 0; w < 8; ++w) from_lane(g + kHm + 64 * w, i, blk + 4 * w, 4);
    } else {
      from_lane(g, i, blk + 80, 2);
      from_lane(g + 32, i, blk + 82, 2);
      for (int sb = 0; sb < 16; ++sb) blk[sb] = g[kSc + 16 * sb + i];
    }
    for (int w = 0; w < 16; ++w) from_lane(g + kQs + 64 * w, i, blk + kRowQs + 4 * w, 4);
  }

  struct State {
    __m512 scaled, mins;
  };
  QT_VNNI static void part(const uint8_t* g, const GgmlTokenI8& x, size_t j, int p, State& st, __m512&) {
    const __m512i two = _mm512_set1_epi8(0x03), bit2 = _mm512_set1_epi8(0x04);
    const int h = p / 2, half = p % 2;
    const int8_t* q = x.q.data() + 256 * j + 128 * h + 16 * half;
    const float* dx = x.d.data() + 8 * j;
    const int32_t* sum16 = x.sum16.data() + 16 * j;
    if (p == 0) st.scaled = st.mins = _mm512_setzero_ps();
    __m512i a[4];
    for (int k = 0; k < 4; ++k) a[k] = _mm512_set1_epi32(kQ3 ? -4 * sum16[8 * h + 2 * k + half] : 0);
    for (int c = 0; c < 4; ++c) {
      const __m512i w = _mm512_loadu_si512(g + kQs + 256 * size_t(p) + 64 * c);
      [[maybe_unused]] __m512i hm;
      if constexpr (kQ3) hm = _mm512_loadu_si512(g + kHm + 64 * (4 * half + c));
      for (int k = 0; k < 4; ++k) {
        __m512i code = _mm512_and_si512(_mm512_srli_epi16(w, unsigned(2 * k)), two);
        if constexpr (kQ3) {  // hmask bit 4h + k to bit 2 (16-bit shifts; the mask keeps each byte's own bit)
          const int bit = 4 * h + k;
          const __m512i moved =
              bit >= 2 ? _mm512_srli_epi16(hm, unsigned(bit - 2)) : _mm512_slli_epi16(hm, unsigned(2 - bit));
          code = _mm512_or_si512(code, _mm512_and_si512(moved, bit2));
        }
        a[k] = _mm512_dpbusd_epi32(a[k], code, broadcast4(q + 32 * k + 4 * c));
      }
    }
    for (int k = 0; k < 4; ++k) {
      const int sb = 8 * h + 2 * k + half;
      const __m512 d = _mm512_set1_ps(dx[sb / 2]);
      if constexpr (kQ3) {
        st.scaled = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[k]), _mm512_mul_ps(i8x16(g + kSc + 16 * sb), d), st.scaled);
      } else {
        const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kSc + 16 * sb)));
        const __m512 sc = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(0xF)));
        const __m512 mn = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
        st.scaled = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[k]), _mm512_mul_ps(sc, d), st.scaled);
        st.mins = _mm512_fmadd_ps(mn, _mm512_set1_ps(dx[sb / 2] * float(sum16[sb])), st.mins);
      }
    }
  }
  QT_VNNI static void finish(const uint8_t* g, State& st, __m512& acc) {
    acc = _mm512_fmadd_ps(st.scaled, half16(g), acc);
    if constexpr (!kQ3) acc = _mm512_fnmadd_ps(st.mins, half16(g + 32), acc);
  }
};

// IQ4_XS: 8 sub-blocks of 32, each d·(ls - 32)·grid[nibble], the nibbles of sub-block ib in
// qs[16ib..] as IQ4_NL's (ggml's dequantize_row_iq4_xs). A group block: 16 fp16 d | the sub-blocks'
// 6-bit ls - 32 as int8, [sub-block][row] (+2 bytes a row: +1.5%) | 4 parts of two sub-blocks, each
// 4 code words (bytes 4t..4t+3 of the sub-block's 16).
struct IQ4XSKernel {
  static constexpr size_t kBlock = 136, kSc = 32, kCodes = kSc + 128, kPart = 512;
  static constexpr size_t kGroupBlock = kCodes + 4 * kPart;
  static constexpr int kParts = 4;
  static constexpr size_t begin(int p) { return p == 0 ? 0 : kCodes + kPart * size_t(p); }

  static void pack(const uint8_t* blk, int i, uint8_t* o) {
    to_lane(o, i, blk, 2);
    for (int ib = 0; ib < 8; ++ib) {
      int ls = 32;  // a padding row: scale 0
      if (blk) ls = ((blk[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((blk[2] | blk[3] << 8) >> (2 * ib)) & 3) << 4;
      o[kSc + 16 * ib + i] = uint8_t(int8_t(ls - 32));
    }
    for (int w = 0; w < 32; ++w) to_lane(o + kCodes + 64 * w, i, blk ? blk + 8 + 4 * w : nullptr, 4);
  }
  static void unpack(const uint8_t* g, int i, uint8_t* blk) {
    from_lane(g, i, blk, 2);
    uint16_t sh = 0;
    std::memset(blk + 4, 0, 4);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = int(int8_t(g[kSc + 16 * ib + i])) + 32;
      blk[4 + ib / 2] = uint8_t(blk[4 + ib / 2] | (ls & 0xF) << (4 * (ib % 2)));
      sh = uint16_t(sh | (ls >> 4) << (2 * ib));
    }
    blk[2] = uint8_t(sh & 0xFF);
    blk[3] = uint8_t(sh >> 8);
    for (int w = 0; w < 32; ++w) from_lane(g + kCodes + 64 * w, i, blk + 8 + 4 * w, 4);
  }

  struct State {
    __m512 f;
  };
  QT_VNNI static void part(const uint8_t* g, const GgmlTokenI8& x, size_t j, int p, State& st, __m512&) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i grid = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlU8.v)));
    if (p == 0) st.f = _mm512_setzero_ps();
    for (int s = 0; s < 2; ++s) {
      const int ib = 2 * p + s;
      const int8_t* q = x.q.data() + 256 * j + 32 * ib;
      __m512i a0 = _mm512_set1_epi32(-128 * int32_t(x.sum32[8 * j + ib])), a1 = _mm512_setzero_si512();
      for (int t = 0; t < 4; ++t) {
        const __m512i c = _mm512_loadu_si512(g + kCodes + 256 * size_t(ib) + 64 * t);
        a0 = _mm512_dpbusd_epi32(a0, _mm512_shuffle_epi8(grid, _mm512_and_si512(c, low4)), broadcast4(q + 4 * t));
        a1 = _mm512_dpbusd_epi32(a1, _mm512_shuffle_epi8(grid, _mm512_and_si512(_mm512_srli_epi16(c, 4), low4)),
                                 broadcast4(q + 16 + 4 * t));
      }
      st.f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)),
                             _mm512_mul_ps(i8x16(g + kSc + 16 * ib), _mm512_set1_ps(x.d[8 * j + ib])), st.f);
    }
  }
  QT_VNNI static void finish(const uint8_t* g, State& st, __m512& acc) { acc = _mm512_fmadd_ps(st.f, half16(g), acc); }
};

template <class K>
void pack(const uint8_t* const rows[16], size_t nb, uint8_t* dst) {
  for (size_t j = 0; j < nb; ++j)
    for (int i = 0; i < 16; ++i) K::pack(rows[i] ? rows[i] + j * K::kBlock : nullptr, i, dst + j * K::kGroupBlock);
}

template <class K>
void unpack(const uint8_t* group, int i, size_t nb, uint8_t* out) {
  for (size_t j = 0; j < nb; ++j) K::unpack(group + j * K::kGroupBlock, i, out + j * K::kBlock);
}

// Every byte of a part is asked for 2 KiB before it is read: the hardware prefetcher alone feeds
// these loops at ~80% of a core's read rate (2-core Xeon, 8B-shaped Q4_0 groups from DRAM, 1 thread:
// 13.3 GB/s without, 15.7 at 2 KiB; 1 and 4 KiB: 14.9, 13.9; Q4_K parts: 12.0 without, 14.9–15.4 at
// 1–3 KiB). Four groups walked side by side keep more reads in flight than one (the device Xeon,
// 1 thread, Q4_0: 10.7 GB/s for one group at a time, 17.6 for two, 17.9 for four; 16 threads: 127,
// 135, 140 GB/s) — as llama.cpp's AMX backend walks four tiles of 16 rows for one token
// (ggml-cpu/amx/mmq.cpp).
constexpr size_t kAhead = 2048;

template <class K, int kCount>
QT_VNNI void gemv_groups(const uint8_t* g0, size_t stride, const GgmlTokenI8& x, size_t nb, float* y) {
  __m512 acc[kCount];
  typename K::State st[kCount];
  for (int n = 0; n < kCount; ++n) acc[n] = _mm512_setzero_ps();
  for (size_t j = 0; j < nb; ++j) {
    for (int p = 0; p < K::kParts; ++p)
      for (int n = 0; n < kCount; ++n) {
        const uint8_t* g = g0 + size_t(n) * stride + j * K::kGroupBlock;
        for (size_t o = K::begin(p); o < K::begin(p + 1); o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(g + kAhead + o), _MM_HINT_T0);
        K::part(g, x, j, p, st[n], acc[n]);
      }
    for (int n = 0; n < kCount; ++n) K::finish(g0 + size_t(n) * stride + j * K::kGroupBlock, st[n], acc[n]);
  }
  for (int n = 0; n < kCount; ++n) _mm512_storeu_ps(y + 16 * n, acc[n]);
}

template <class K>
void gemv(const uint8_t* groups, size_t stride, int count, const GgmlTokenI8& x, size_t nb, float* y) {
  switch (count) {
    case 4: return gemv_groups<K, 4>(groups, stride, x, nb, y);
    case 3: return gemv_groups<K, 3>(groups, stride, x, nb, y);
    case 2: return gemv_groups<K, 2>(groups, stride, x, nb, y);
    default: return gemv_groups<K, 1>(groups, stride, x, nb, y);
  }
}

#pragma GCC diagnostic pop

template <class K>
constexpr GgmlInterleaved kKernels = {K::kGroupBlock, pack<K>, unpack<K>, gemv<K>};

}  // namespace

const GgmlInterleaved* ggml_interleaved(uint32_t type) {
  if (!ggml_i8_supported()) return nullptr;
  switch (GgmlType(type)) {
    case GgmlType::Q4_0: return &kKernels<LegacyKernel<Legacy::Q4_0>>;
    case GgmlType::Q4_1: return &kKernels<LegacyKernel<Legacy::Q4_1>>;
    case GgmlType::Q5_0: return &kKernels<LegacyKernel<Legacy::Q5_0>>;
    case GgmlType::Q5_1: return &kKernels<LegacyKernel<Legacy::Q5_1>>;
    case GgmlType::Q8_0: return &kKernels<LegacyKernel<Legacy::Q8_0>>;
    case GgmlType::IQ4_NL: return &kKernels<LegacyKernel<Legacy::IQ4_NL>>;
    case GgmlType::MXFP4: return &kKernels<LegacyKernel<Legacy::MXFP4>>;
    case GgmlType::IQ4_XS: return &kKernels<IQ4XSKernel>;
    case GgmlType::Q2_K: return &kKernels<LowBitKKernel<false>>;
    case GgmlType::Q3_K: return &kKernels<LowBitKKernel<true>>;
    case GgmlType::Q4_K: return &kKernels<QKKernel<false>>;
    case GgmlType::Q5_K: return &kKernels<QKKernel<true>>;
    case GgmlType::Q6_K: return &kKernels<Q6KKernel>;
    default: return nullptr;
  }
}

}  // namespace qt::kernels
