// ggml block types: the table (ids, block sizes and bytes from ggml's type traits, ggml.h and
// ggml-common.h; docs/spec/gguf.md §Tensor types and sizes)
// and dequantization, written to match gguf-py's numpy code (gguf/quants.py) bit for bit:
// the same operations in the same order, all in fp32.
// FMA: numpy never fuses a*b+c. With f16 scales every product below is exact in fp32 except
// Q6_K's (d*scale)*q, which has no addition, so fusing could not change a result today; the
// pragmas still forbid contraction so that a future reordering cannot silently break goldens
// (checked: with -march=native, g++ emits 68 and clang 292 FMAs in this file without them, 0 with).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "formats/ggml_blocks.h"

#include <algorithm>
#include <cstring>

namespace qt {

namespace {

constexpr int QK_K = 256;

// IEEE binary16 → fp32, exact (numpy astype(float32)); inline so the loops below stay tight.
inline float h2f(const uint8_t* p) {
  uint16_t h = uint16_t(p[0] | (p[1] << 8));
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: value = mant * 2^-24, exact in fp32
      float f = float(mant) * (1.0f / 16777216.0f);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void deq_f32(const uint8_t* src, float* dst, size_t nb) {
  if (nb) std::memcpy(dst, src, nb * 4);
}

void deq_f16(const uint8_t* src, float* dst, size_t nb) {
  for (size_t i = 0; i < nb; ++i) dst[i] = h2f(src + 2 * i);
}

void deq_bf16(const uint8_t* src, float* dst, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    uint32_t u = uint32_t(src[2 * i] | (src[2 * i + 1] << 8)) << 16;
    std::memcpy(dst + i, &u, 4);
  }
}

// Q4_0: d * (q - 8); low nibbles are elements 0..15, high nibbles 16..31.
void deq_q4_0(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 18, dst += 32) {
    const float d = h2f(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(int(qs[j] & 0xF) - 8);
      dst[j + 16] = d * float(int(qs[j] >> 4) - 8);
    }
  }
}

// Q4_1: (d * q) + m.
void deq_q4_1(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 20, dst += 32) {
    const float d = h2f(src), m = h2f(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(qs[j] & 0xF) + m;
      dst[j + 16] = d * float(qs[j] >> 4) + m;
    }
  }
}

inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Q5_0: d * (q - 16), the fifth bit of element j is bit j of qh.
void deq_q5_0(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 22, dst += 32) {
    const float d = h2f(src);
    const uint32_t qh = load_u32(src + 2);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < 16; ++j) {
      int lo = (qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
      int hi = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      dst[j] = d * float(lo - 16);
      dst[j + 16] = d * float(hi - 16);
    }
  }
}

// Q5_1: (d * q) + m.
void deq_q5_1(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 24, dst += 32) {
    const float d = h2f(src), m = h2f(src + 2);
    const uint32_t qh = load_u32(src + 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 16; ++j) {
      int lo = (qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
      int hi = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      dst[j] = d * float(lo) + m;
      dst[j + 16] = d * float(hi) + m;
    }
  }
}

// Q8_0: q * d.
void deq_q8_0(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 34, dst += 32) {
    const float d = h2f(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = float(qs[j]) * d;
  }
}

// Q2_K: (d * (sc & 15)) * q - dmin * (sc >> 4), 16 sub-blocks of 16.
void deq_q2_k(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 84, dst += QK_K) {
    const uint8_t* scales = src;
    const uint8_t* qs = src + 16;
    const float d = h2f(src + 80), dmin = h2f(src + 82);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int half = 0; half < 2; ++half) {
          const int s = 8 * h + 2 * j + half;
          const float dl = d * float(scales[s] & 0xF);
          const float ml = dmin * float(scales[s] >> 4);
          float* y = dst + 128 * h + 32 * j + 16 * half;
          const uint8_t* q = qs + 32 * h + 16 * half;
          for (int l = 0; l < 16; ++l) y[l] = dl * float((q[l] >> (2 * j)) & 3) - ml;
        }
  }
}

// Q3_K: (d * (sc - 32)) * q, q = low 2 bits - (high bit set ? 0 : 4).
void deq_q3_k(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 110, dst += QK_K) {
    const uint8_t* hmask = src;
    const uint8_t* qs = src + 32;
    const uint8_t* sb = src + 96;
    const float d = h2f(src + 108);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int half = 0; half < 2; ++half) {
          const int k = 8 * h + 2 * j + half;  // 0..15
          const int lsc = (k < 8 ? sb[k] : sb[k - 8] >> 4) & 0xF;
          const int hsc = (sb[8 + k % 4] >> (2 * (k / 4))) & 3;
          const float dl = d * float((lsc | (hsc << 4)) - 32);
          float* y = dst + 128 * h + 32 * j + 16 * half;
          const int bit = 4 * h + j;
          for (int l0 = 0; l0 < 16; ++l0) {
            const int l = 16 * half + l0;
            int q = (qs[32 * h + l] >> (2 * j)) & 3;
            q -= ((hmask[l] >> bit) & 1) ? 0 : 4;
            y[l0] = dl * float(q);
          }
        }
  }
}

// Q4_K / Q5_K 6-bit scale and min of sub-block t (0..7).
inline void scale_min_k4(int t, const uint8_t* s, int* sc, int* mn) {
  if (t < 4) {
    *sc = s[t] & 63;
    *mn = s[t + 4] & 63;
  } else {
    *sc = (s[t + 4] & 0xF) | ((s[t - 4] >> 6) << 4);
    *mn = (s[t + 4] >> 4) | ((s[t] >> 6) << 4);
  }
}

// Q4_K: (d * sc) * q - dmin * mn, 8 sub-blocks of 32.
void deq_q4_k(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 144, dst += QK_K) {
    const float d = h2f(src), dmin = h2f(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qs = src + 16;
    for (int t = 0; t < 8; ++t) {
      int sc, mn;
      scale_min_k4(t, scales, &sc, &mn);
      const float dl = d * float(sc), ml = dmin * float(mn);
      const uint8_t* q = qs + 32 * (t / 2);
      const int shift = 4 * (t % 2);
      float* y = dst + 32 * t;
      for (int l = 0; l < 32; ++l) y[l] = dl * float((q[l] >> shift) & 0xF) - ml;
    }
  }
}

// Q5_K: as Q4_K with a fifth bit from qh (bit t of qh[l] for sub-block t).
void deq_q5_k(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 176, dst += QK_K) {
    const float d = h2f(src), dmin = h2f(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + 48;
    for (int t = 0; t < 8; ++t) {
      int sc, mn;
      scale_min_k4(t, scales, &sc, &mn);
      const float dl = d * float(sc), ml = dmin * float(mn);
      const uint8_t* q = qs + 32 * (t / 2);
      const int shift = 4 * (t % 2);
      float* y = dst + 32 * t;
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0xF) | (((qh[l] >> t) & 1) << 4);
        y[l] = dl * float(v) - ml;
      }
    }
  }
}

// Q6_K: (d * scale) * (q - 32), 16 sub-blocks of 16 with int8 scales.
void deq_q6_k(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 210, dst += QK_K) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* scales = reinterpret_cast<const int8_t*>(src + 192);
    const float d = h2f(src + 208);
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int half = 0; half < 2; ++half) {
          const float dl = d * float(scales[8 * h + 2 * k + half]);
          float* y = dst + 128 * h + 32 * k + 16 * half;
          const uint8_t* lo = ql + 64 * h + 32 * (k % 2) + 16 * half;
          const uint8_t* hi = qh + 32 * h + 16 * half;
          const int lshift = 4 * (k / 2);
          for (int l = 0; l < 16; ++l) {
            const int q = (((lo[l] >> lshift) & 0xF) | (((hi[l] >> (2 * k)) & 3) << 4)) - 32;
            y[l] = dl * float(q);
          }
        }
  }
}

// IQ4_NL: d * kvalues[nibble] (non-linear 4-bit grid).
void deq_iq4_nl(const uint8_t* src, float* dst, size_t nb) {
  static constexpr int8_t kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};
  for (size_t b = 0; b < nb; ++b, src += 18, dst += 32) {
    const float d = h2f(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(kv[qs[j] & 0xF]);
      dst[j + 16] = d * float(kv[qs[j] >> 4]);
    }
  }
}

// ggml's type traits (ggml.c type_traits): id, name, block size, bytes per block. Types we
// cannot dequantize still parse (a file may hold them), with to_float = nullptr.
constexpr GgmlTypeRow kRows[] = {
    {GgmlType::F32, "F32", 1, 4, deq_f32},
    {GgmlType::F16, "F16", 1, 2, deq_f16},
    {GgmlType::Q4_0, "Q4_0", 32, 18, deq_q4_0},
    {GgmlType::Q4_1, "Q4_1", 32, 20, deq_q4_1},
    {GgmlType::Q5_0, "Q5_0", 32, 22, deq_q5_0},
    {GgmlType::Q5_1, "Q5_1", 32, 24, deq_q5_1},
    {GgmlType::Q8_0, "Q8_0", 32, 34, deq_q8_0},
    {GgmlType::Q8_1, "Q8_1", 32, 36, nullptr},
    {GgmlType::Q2_K, "Q2_K", 256, 84, deq_q2_k},
    {GgmlType::Q3_K, "Q3_K", 256, 110, deq_q3_k},
    {GgmlType::Q4_K, "Q4_K", 256, 144, deq_q4_k},
    {GgmlType::Q5_K, "Q5_K", 256, 176, deq_q5_k},
    {GgmlType::Q6_K, "Q6_K", 256, 210, deq_q6_k},
    {GgmlType::Q8_K, "Q8_K", 256, 292, nullptr},
    {GgmlType(16), "IQ2_XXS", 256, 66, nullptr},
    {GgmlType(17), "IQ2_XS", 256, 74, nullptr},
    {GgmlType(18), "IQ3_XXS", 256, 98, nullptr},
    {GgmlType(19), "IQ1_S", 256, 50, nullptr},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, deq_iq4_nl},
    {GgmlType(21), "IQ3_S", 256, 110, nullptr},
    {GgmlType(22), "IQ2_S", 256, 82, nullptr},
    {GgmlType(23), "IQ4_XS", 256, 136, nullptr},
    {GgmlType::I8, "I8", 1, 1, nullptr},
    {GgmlType::I16, "I16", 1, 2, nullptr},
    {GgmlType::I32, "I32", 1, 4, nullptr},
    {GgmlType::I64, "I64", 1, 8, nullptr},
    {GgmlType::F64, "F64", 1, 8, nullptr},
    {GgmlType(29), "IQ1_M", 256, 56, nullptr},
    {GgmlType::BF16, "BF16", 1, 2, deq_bf16},
    {GgmlType(34), "TQ1_0", 256, 54, nullptr},
    {GgmlType(35), "TQ2_0", 256, 66, nullptr},
    {GgmlType(39), "MXFP4", 32, 17, nullptr},
    {GgmlType(40), "NVFP4", 64, 36, nullptr},
    {GgmlType(41), "Q1_0", 128, 18, nullptr},
};

}  // namespace

const GgmlTypeRow* ggml_type_row(uint32_t id) {
  for (const auto& r : kRows)
    if (uint32_t(r.type) == id) return &r;
  return nullptr;
}

const GgmlTypeRow* ggml_type_row_by_name(std::string_view name) {
  for (const auto& r : kRows)
    if (name == r.name) return &r;
  return nullptr;
}

void ggml_dequantize(const GgmlTypeRow& row, const uint8_t* src, float* dst, size_t nblocks) {
  // One thread is already fast (the whole 135M-parameter model in ~0.2 s); threads only pay off
  // for big tensors: every parallel region costs a barrier, and on a loaded machine a barrier
  // waits for a descheduled thread (measured: 272 small regions made loading 5-10x slower).
  const size_t n = nblocks * size_t(row.block_size);
  const size_t chunk = std::max<size_t>(1, (size_t(1) << 18) / size_t(row.block_size));
  const long long nchunks = (long long)((nblocks + chunk - 1) / chunk);
  if (n < (size_t(1) << 23) || nchunks <= 1) {
    row.to_float(src, dst, nblocks);
    return;
  }
#pragma omp parallel for schedule(static)
  for (long long c = 0; c < nchunks; ++c) {
    const size_t b0 = size_t(c) * chunk;
    const size_t nb = std::min(chunk, nblocks - b0);
    row.to_float(src + b0 * size_t(row.type_size), dst + b0 * size_t(row.block_size), nb);
  }
}

}  // namespace qt
