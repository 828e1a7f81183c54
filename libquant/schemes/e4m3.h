// FP8 E4M3 as the OCP 8-bit floating point spec defines it and torch calls float8_e4m3fn: 1 sign,
// 4 exponent bits (bias 7), 3 mantissa bits; no infinities, one NaN per sign (S.1111.111); largest
// finite ±448 (1.75·2^8), smallest normal 2^-6, subnormals m·2^-9 (m = 1…7).
//
// The rounding is torch's cast `.to(torch.float8_e4m3fn)` (c10/util/Float8_e4m3fn.h,
// fp8e4m3fn_from_fp32_value, for finite values below 448), defined here once: round to nearest,
// ties to even. Beyond the range torch 2.15's CPU cast saturates: |x| ≥ 448 and ±Inf give ±448
// (0x7e | sign), NaN gives 0x7f | sign (c10's scalar function would give NaN for |x| ≥ 464; the
// quantizers clamp to ±448 first, as compressed-tensors does, so they never see the difference).
// tests/test_fp8.cpp checks it against torch over every bf16 bit pattern and every fp32 midpoint
// ± 1 ulp.
#pragma once
#include <cstdint>
#include <cstring>

// The scalar functions compile for the GPU too (the FP8 path's per-token activations,
// cuda/int8_ops.cu; FP8_BLOCK's weight decode and activation groups, cuda/blockfp.cu).
#ifdef __CUDACC__
#define QT_E4M3_HD __host__ __device__
#else
#define QT_E4M3_HD
#endif

namespace qt {

QT_E4M3_HD inline uint8_t e4m3_from_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint8_t r;
  if (u > 0x7f800000u) {  // NaN
    r = 0x7f;
  } else if (u >= 0x43e00000u) {  // ≥ 448 (and Inf): saturated
    r = 0x7e;
  } else if (u < (121u << 23)) {  // below 2^-6: subnormal, rounded by adding 2^14 in fp32 (RNE)
    const uint32_t magic = 141u << 23;
    float m, a;
    std::memcpy(&m, &magic, 4);
    std::memcpy(&a, &u, 4);
    a += m;
    std::memcpy(&u, &a, 4);
    r = uint8_t(u - magic);
  } else {  // normal: rebias the exponent, round the 20 dropped mantissa bits half to even
    const uint32_t odd = (u >> 20) & 1u;
    u += (uint32_t(7 - 127) << 23) + 0x7ffffu + odd;
    r = uint8_t(u >> 20);
  }
  return uint8_t(r | (sign >> 24));
}

// The value of a code (NaN for 0x7f / 0xff).
QT_E4M3_HD inline float e4m3_to_f32(uint8_t c) {
  const uint32_t e = (c >> 3) & 15u, m = c & 7u;
  float v;
  if (e == 15 && m == 7) {
    const uint32_t nan = 0x7fc00000u;  // the quiet NaN __builtin_nanf("") gives, spelled for the device too
    std::memcpy(&v, &nan, 4);
  } else if (e == 0) {
    v = float(m) * 0.001953125f;  // m · 2^-9
  } else {
    const uint32_t bits = ((e + 120u) << 23) | (m << 20);  // exponent e − 7 + 127
    std::memcpy(&v, &bits, 4);
  }
  return (c & 0x80) ? -v : v;
}

// e4m3_to_f32(e4m3_from_f32(x)) for |x| ≤ 448 (the quantizers clamp first), without the byte: the
// same rounding kept in fp32 bits, branch-free so that loops over it vectorize.
QT_E4M3_HD inline float e4m3_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  float a;
  std::memcpy(&a, &u, 4);
  const float sub = (a + 16384.0f) - 16384.0f;                    // multiples of 2^-9 (2^14's fp32 ulp), half to even
  uint32_t nb = (u + 0x7ffffu + ((u >> 20) & 1u)) & 0xfff00000u;  // 3 mantissa bits, half to even
  uint32_t sb;
  std::memcpy(&sb, &sub, 4);
  uint32_t r = u < (121u << 23) ? sb : nb;
  r |= sign;
  float v;
  std::memcpy(&v, &r, 4);
  return v;
}

}  // namespace qt
