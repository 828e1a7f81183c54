// ggml_interleaved (ggml_interleaved.h). Block layouts: ggml-common.h's block_q4_0 (d, qs[16]),
// block_q4_1 (d, m, qs[16]), block_q8_0 (d, qs[32] signed), as formats/ggml_quants_legacy.cpp reads them.
#include "libquant/kernels/ggml_interleaved.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "formats/ggml_blocks.h"

namespace qt::kernels {
namespace {

#define QT_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))

enum class Legacy { Q4_0, Q4_1, Q8_0 };

template <Legacy kT>
struct Shape {
  static constexpr size_t kBlock = kT == Legacy::Q4_0 ? 18 : kT == Legacy::Q4_1 ? 20 : 34;  // a row's block
  static constexpr size_t kHeader = kT == Legacy::Q4_1 ? 4 : 2;                             // d (and m)
  static constexpr int kWords = kT == Legacy::Q8_0 ? 8 : 4;                                 // 4 code bytes each
  static constexpr size_t kScales = 16 * kHeader;  // a group block's d (and m) vectors
  static constexpr size_t kGroupBlock = 16 * kBlock;
};

template <Legacy kT>
void pack(const uint8_t* const rows[16], size_t nb, uint8_t* dst) {
  using S = Shape<kT>;
  for (size_t j = 0; j < nb; ++j) {
    uint8_t* o = dst + j * S::kGroupBlock;
    for (int i = 0; i < 16; ++i) {
      if (!rows[i]) {
        for (size_t h = 0; h < S::kHeader; h += 2) std::memset(o + 16 * h + 2 * i, 0, 2);
        for (int t = 0; t < S::kWords; ++t) std::memset(o + S::kScales + 64 * t + 4 * i, 0, 4);
        continue;
      }
      const uint8_t* blk = rows[i] + j * S::kBlock;
      for (size_t h = 0; h < S::kHeader; h += 2) std::memcpy(o + 16 * h + 2 * i, blk + h, 2);
      for (int t = 0; t < S::kWords; ++t) std::memcpy(o + S::kScales + 64 * t + 4 * i, blk + S::kHeader + 4 * t, 4);
    }
  }
}

template <Legacy kT>
void unpack(const uint8_t* group, int i, size_t nb, uint8_t* out) {
  using S = Shape<kT>;
  for (size_t j = 0; j < nb; ++j) {
    const uint8_t* g = group + j * S::kGroupBlock;
    uint8_t* blk = out + j * S::kBlock;
    for (size_t h = 0; h < S::kHeader; h += 2) std::memcpy(blk + h, g + 16 * h + 2 * i, 2);
    for (int t = 0; t < S::kWords; ++t) std::memcpy(blk + S::kHeader + 4 * t, g + S::kScales + 64 * t + 4 * i, 4);
  }
}

// A group block's bytes `max(2 KiB, its size + 1 KiB)` ahead: the hardware prefetcher alone feeds
// these loops at ~80% of a core's read rate (8B-shaped Q4_0 groups from DRAM, 1 thread: 13.3 GB/s
// without, 15.7 at 2 KiB; 1 and 4 KiB: 14.9, 13.9); the K-quants' blocks are larger than 2 KiB.
inline void prefetch_ahead(const uint8_t* g, size_t block) {
  const size_t ahead = std::max<size_t>(2048, block + 1024);
  for (size_t o = 0; o < block; o += 64) _mm_prefetch(reinterpret_cast<const char*>(g + ahead + o), _MM_HINT_T0);
}

QT_VNNI inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Per block: the codes × token values summed exactly in int32 lanes (VPDPBUSD: unsigned codes,
// signed token values; Q8_0's codes made unsigned by + 128), the offset (Q4_0's 8, Q8_0's 128)
// taken back through the token block's sum, then d·dx in fp32; Q4_1 adds m·dx·Σq.
template <Legacy kT>
QT_VNNI void gemv(const uint8_t* g, const GgmlTokenI8& x, size_t nb, float* y) {
  using S = Shape<kT>;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 acc = _mm512_setzero_ps();
  for (size_t j = 0; j < nb; ++j, g += S::kGroupBlock) {
    prefetch_ahead(g, S::kGroupBlock);
    const int8_t* q = x.q.data() + 32 * j;
    const int32_t offset = kT == Legacy::Q4_0 ? 8 : kT == Legacy::Q8_0 ? 128 : 0;
    __m512i a0 = _mm512_set1_epi32(-offset * int32_t(x.sum32[j])), a1 = _mm512_setzero_si512();
    const uint8_t* words = g + S::kScales;
    if constexpr (kT == Legacy::Q8_0) {
      const __m512i sign = _mm512_set1_epi8(char(0x80));
      for (int t = 0; t < 8; t += 2) {
        a0 = _mm512_dpbusd_epi32(a0, _mm512_xor_si512(_mm512_loadu_si512(words + 64 * t), sign), broadcast4(q + 4 * t));
        a1 = _mm512_dpbusd_epi32(a1, _mm512_xor_si512(_mm512_loadu_si512(words + 64 * t + 64), sign),
                                 broadcast4(q + 4 * t + 4));
      }
    } else {
      for (int t = 0; t < 4; ++t) {
        const __m512i c = _mm512_loadu_si512(words + 64 * t);
        a0 = _mm512_dpbusd_epi32(a0, _mm512_and_si512(c, low4), broadcast4(q + 4 * t));
        a1 = _mm512_dpbusd_epi32(a1, _mm512_and_si512(_mm512_srli_epi16(c, 4), low4), broadcast4(q + 16 + 4 * t));
      }
    }
    const __m512 dx = _mm512_set1_ps(x.d[j]);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)), _mm512_mul_ps(d, dx), acc);
    if constexpr (kT == Legacy::Q4_1) {
      const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32)));
      acc = _mm512_fmadd_ps(m, _mm512_set1_ps(x.d[j] * x.sum32[j]), acc);
    }
  }
  _mm512_storeu_ps(y, acc);
}

template <Legacy kT>
constexpr GgmlInterleaved kKernels = {Shape<kT>::kGroupBlock, pack<kT>, unpack<kT>, gemv<kT>};

// Q4_K: block_q4_K (d, dmin, scales[12], qs[128]); the 6-bit scale and minimum of sub-block s as
// ggml's get_scale_min_k4 reads them.
namespace q4k {
constexpr size_t kBlock = 144, kCodes = 320, kGroupBlock = kCodes + 16 * 128;

void pack(const uint8_t* const rows[16], size_t nb, uint8_t* dst) {
  for (size_t j = 0; j < nb; ++j) {
    uint8_t* o = dst + j * kGroupBlock;
    std::memset(o, 0, kGroupBlock);
    for (int i = 0; i < 16; ++i) {
      if (!rows[i]) continue;
      const uint8_t* blk = rows[i] + j * kBlock;
      std::memcpy(o + 2 * i, blk, 2);
      std::memcpy(o + 32 + 2 * i, blk + 2, 2);
      const uint8_t* s = blk + 4;
      for (int t = 0; t < 4; ++t) {
        o[64 + 16 * t + i] = s[t] & 63;
        o[192 + 16 * t + i] = s[t + 4] & 63;
        o[64 + 16 * (t + 4) + i] = uint8_t((s[t + 8] & 0xF) | ((s[t] >> 6) << 4));
        o[192 + 16 * (t + 4) + i] = uint8_t((s[t + 8] >> 4) | ((s[t + 4] >> 6) << 4));
      }
      for (int w = 0; w < 32; ++w) std::memcpy(o + kCodes + 64 * w + 4 * i, blk + 16 + 4 * w, 4);
    }
  }
}

void unpack(const uint8_t* group, int i, size_t nb, uint8_t* out) {
  for (size_t j = 0; j < nb; ++j) {
    const uint8_t* g = group + j * kGroupBlock;
    uint8_t* blk = out + j * kBlock;
    std::memcpy(blk, g + 2 * i, 2);
    std::memcpy(blk + 2, g + 32 + 2 * i, 2);
    uint8_t* s = blk + 4;
    for (int t = 0; t < 4; ++t) {  // the packing above, inverted (every value < 64)
      const uint8_t sc = g[64 + 16 * t + i], mn = g[192 + 16 * t + i];
      const uint8_t sc4 = g[64 + 16 * (t + 4) + i], mn4 = g[192 + 16 * (t + 4) + i];
      s[t] = uint8_t(sc | (sc4 >> 4) << 6);
      s[t + 4] = uint8_t(mn | (mn4 >> 4) << 6);
      s[t + 8] = uint8_t((sc4 & 0xF) | (mn4 & 0xF) << 4);
    }
    for (int w = 0; w < 32; ++w) std::memcpy(blk + 16 + 4 * w, g + kCodes + 64 * w + 4 * i, 4);
  }
}

QT_VNNI inline __m512 bytes16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// w = d·sc·q - dmin·mn per sub-block of 32: Σ w·x = d·Σ_s sc_s·dx_s·(q·xq)_s - dmin·Σ_s mn_s·dx_s·Σxq_s.
QT_VNNI void gemv(const uint8_t* g, const GgmlTokenI8& x, size_t nb, float* y) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 acc = _mm512_setzero_ps();
  for (size_t j = 0; j < nb; ++j, g += kGroupBlock) {
    prefetch_ahead(g, kGroupBlock);
    const int8_t* q = x.q.data() + 256 * j;
    const float* dx = x.d.data() + 8 * j;
    const float* sum = x.sum32.data() + 8 * j;
    __m512 scaled = _mm512_setzero_ps(), mins = _mm512_setzero_ps();
    for (int p = 0; p < 4; ++p) {
      __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
      for (int t = 0; t < 8; ++t) {
        const __m512i c = _mm512_loadu_si512(g + kCodes + 512 * p + 64 * t);
        lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(c, low4), broadcast4(q + 64 * p + 4 * t));
        hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(c, 4), low4),
                                 broadcast4(q + 64 * p + 32 + 4 * t));
      }
      const int s0 = 2 * p, s1 = 2 * p + 1;
      scaled = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(bytes16(g + 64 + 16 * s0), _mm512_set1_ps(dx[s0])),
                               scaled);
      scaled = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(bytes16(g + 64 + 16 * s1), _mm512_set1_ps(dx[s1])),
                               scaled);
      mins = _mm512_fmadd_ps(bytes16(g + 192 + 16 * s0), _mm512_set1_ps(dx[s0] * sum[s0]), mins);
      mins = _mm512_fmadd_ps(bytes16(g + 192 + 16 * s1), _mm512_set1_ps(dx[s1] * sum[s1]), mins);
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32)));
    acc = _mm512_fnmadd_ps(mins, dmin, _mm512_fmadd_ps(scaled, d, acc));
  }
  _mm512_storeu_ps(y, acc);
}

constexpr GgmlInterleaved kKernels = {kGroupBlock, pack, unpack, gemv};
}  // namespace q4k

// Q6_K: block_q6_K (ql[128], qh[64], scales[16] int8, d): 16 sub-blocks of 16, w = d·sc·(q - 32);
// element 128h + 32k + l (l < 32) has its low 4 bits in ql[64h + 32(k%2) + l] >> 4(k/2) and its
// high 2 in qh[32h + l] >> 2k (ggml's dequantize_row_q6_K).
namespace q6k {
constexpr size_t kBlock = 210, kScales = 32, kQl = kScales + 256, kQh = kQl + 16 * 128, kGroupBlock = kQh + 16 * 64;

void pack(const uint8_t* const rows[16], size_t nb, uint8_t* dst) {
  for (size_t j = 0; j < nb; ++j) {
    uint8_t* o = dst + j * kGroupBlock;
    std::memset(o, 0, kGroupBlock);
    for (int i = 0; i < 16; ++i) {
      if (!rows[i]) continue;
      const uint8_t* blk = rows[i] + j * kBlock;
      std::memcpy(o + 2 * i, blk + 208, 2);
      for (int sb = 0; sb < 16; ++sb) o[kScales + 16 * sb + i] = blk[192 + sb];
      for (int w = 0; w < 32; ++w) std::memcpy(o + kQl + 64 * w + 4 * i, blk + 4 * w, 4);
      for (int w = 0; w < 16; ++w) std::memcpy(o + kQh + 64 * w + 4 * i, blk + 128 + 4 * w, 4);
    }
  }
}

void unpack(const uint8_t* group, int i, size_t nb, uint8_t* out) {
  for (size_t j = 0; j < nb; ++j) {
    const uint8_t* g = group + j * kGroupBlock;
    uint8_t* blk = out + j * kBlock;
    std::memcpy(blk + 208, g + 2 * i, 2);
    for (int sb = 0; sb < 16; ++sb) blk[192 + sb] = g[kScales + 16 * sb + i];
    for (int w = 0; w < 32; ++w) std::memcpy(blk + 4 * w, g + kQl + 64 * w + 4 * i, 4);
    for (int w = 0; w < 16; ++w) std::memcpy(blk + 128 + 4 * w, g + kQh + 64 * w + 4 * i, 4);
  }
}

QT_VNNI void gemv(const uint8_t* g, const GgmlTokenI8& x, size_t nb, float* y) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
  __m512 acc = _mm512_setzero_ps();
  for (size_t j = 0; j < nb; ++j, g += kGroupBlock) {
    prefetch_ahead(g, kGroupBlock);
    const int8_t* q = x.q.data() + 256 * j;
    const float* dx = x.d.data() + 8 * j;
    const int32_t* sum16 = x.sum16.data() + 16 * j;
    __m512 f = _mm512_setzero_ps();
    for (int h = 0; h < 2; ++h) {
      for (int half = 0; half < 2; ++half) {  // elements l < 16, then l ≥ 16: sub-blocks 8h + 2k + half
        __m512i a[4];
        for (int k = 0; k < 4; ++k) a[k] = _mm512_set1_epi32(-32 * sum16[8 * h + 2 * k + half]);
        for (int c = 4 * half; c < 4 * half + 4; ++c) {  // l = 4c..4c+3
          const __m512i ql0 = _mm512_loadu_si512(g + kQl + 64 * (16 * h + c));
          const __m512i ql1 = _mm512_loadu_si512(g + kQl + 64 * (16 * h + 8 + c));
          const __m512i qh = _mm512_loadu_si512(g + kQh + 64 * (8 * h + c));
          const __m512i code[4] = {
              _mm512_or_si512(_mm512_and_si512(ql0, low4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), bits45)),
              _mm512_or_si512(_mm512_and_si512(ql1, low4), _mm512_and_si512(_mm512_slli_epi16(qh, 2), bits45)),
              _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), low4), _mm512_and_si512(qh, bits45)),
              _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), low4),
                              _mm512_and_si512(_mm512_srli_epi16(qh, 2), bits45))};
          for (int k = 0; k < 4; ++k)
            a[k] = _mm512_dpbusd_epi32(a[k], code[k], broadcast4(q + 128 * h + 32 * k + 4 * c));
        }
        for (int k = 0; k < 4; ++k) {
          const int sb = 8 * h + 2 * k + half;
          const __m512 sc = _mm512_cvtepi32_ps(
              _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kScales + 16 * sb))));
          f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[k]), _mm512_mul_ps(sc, _mm512_set1_ps(dx[sb / 2])), f);
        }
      }
    }
    acc = _mm512_fmadd_ps(f, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g))), acc);
  }
  _mm512_storeu_ps(y, acc);
}

constexpr GgmlInterleaved kKernels = {kGroupBlock, pack, unpack, gemv};
}  // namespace q6k

}  // namespace

const GgmlInterleaved* ggml_interleaved(uint32_t type) {
  if (!ggml_i8_supported()) return nullptr;
  switch (GgmlType(type)) {
    case GgmlType::Q4_0: return &kKernels<Legacy::Q4_0>;
    case GgmlType::Q4_1: return &kKernels<Legacy::Q4_1>;
    case GgmlType::Q8_0: return &kKernels<Legacy::Q8_0>;
    case GgmlType::Q4_K: return &q4k::kKernels;
    case GgmlType::Q6_K: return &q6k::kKernels;
    default: return nullptr;
  }
}

}  // namespace qt::kernels
