// MLX affine and bitsandbytes 4-bit weights as dequantize_weights gives them, for the kernels that
// compute weights in registers (weight_only_linear.cpp, lut4_gemv.cpp, affine8_gemv.cpp): the group
// scales as stored, and their AVX-512 arithmetic.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace qt::kernels {

// An MLX affine weight's scale and bias per group: the stored bf16 arrays read as they are (half
// the bytes), or, where s16 is null, fp32 copies.
struct AffineGroupScales {
  const float *s32, *b32;
  const uint16_t *s16, *b16;
  void operator()(int64_t group, float* s, float* b) const {
    if (s16) {
      const uint32_t su = uint32_t(s16[group]) << 16, bu = uint32_t(b16[group]) << 16;
      std::memcpy(s, &su, 4);
      std::memcpy(b, &bu, 4);
    } else {
      *s = s32[group];
      *b = b32[group];
    }
  }
};

// fp32 -> bf16 -> fp32 with round-to-nearest-even on 16 lanes (finite values; as f32_to_bf16).
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512 round_bf16_16(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  u = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(int(0xffff0000u))));
}

// The weights of codes q: q·s, then + b, each rounded to bf16 when `bf16` (as affine_dequant),
// multiply and add never fused.
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512 affine_of(__m512 q, __m512 vs, __m512 vb,
                                                                                   bool bf16) {
  __m512 w = _mm512_mul_ps(q, vs);
  if (bf16) w = round_bf16_16(w);
  w = _mm512_add_ps(w, vb);
  if (bf16) w = round_bf16_16(w);
  return w;
}

}  // namespace qt::kernels
