// FP4 E2M1 as the OCP Microscaling spec defines it: 1 sign, 2 exponent bits (bias 1), 1 mantissa
// bit; the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 by code 0…7, bit 3 the sign. No Inf or NaN.
//
// The rounding is compressed-tensors' cast_to_fp4 (quantization/utils/fp4_utils.py, its CPU
// path) on a value already clamped to ±6: round to nearest, ties to even (0.25 → 0, 0.75 → 1,
// 1.25 → 1, 1.75 → 2, 2.5 → 2, 3.5 → 4, 5 → 4), the result times torch.sign(x) — so a negative
// value that rounds to zero is −0 and packs with the sign bit set (pack_fp4_to_uint8 reads
// torch.signbit), while −0 itself gives +0 (torch.sign(−0) is 0).
// Packing (pack_fp4_to_uint8): two codes to a byte, the even column's in the low nibble.
#pragma once
#include <cstdint>

// The scalar code and value functions compile for the GPU too (cuda/blockfp.cu: the NVFP4 / MXFP4
// weight decode and activation rounding).
#ifdef __CUDACC__
#define QT_E2M1_HD __host__ __device__
#else
#define QT_E2M1_HD
#endif

namespace qt {

inline constexpr float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// kE2M1Values[code] without the table (which device code cannot read): (2 + m₀)·2^(e − 1)/2 for
// the exponent bits e ≥ 1, m₀/2 for the subnormal codes; code 8 is −0.
QT_E2M1_HD inline float e2m1_value(int code) {
  const int m = code & 7;
  const float mag = m < 2 ? 0.5f * float(m) : 0.5f * float((2 + (m & 1)) << ((m >> 1) - 1));
  return (code & 8) ? -mag : mag;
}

// The code of y, |y| ≤ 6.
QT_E2M1_HD inline int e2m1_code(float y) {
  const float a = y < 0.0f ? -y : y;
  const int m = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  return m | (y < 0.0f ? 8 : 0);
}

// The code of x/s clamped to ±6 (the quotient as the caller computed it).
QT_E2M1_HD inline int e2m1_code_clamped(float y) {
  y = y < -6.0f ? -6.0f : y;
  return e2m1_code(y > 6.0f ? 6.0f : y);
}

// Two codes per byte along a row of even length.
inline void e2m1_pack_row(const int16_t* q, int64_t cols, uint8_t* dst) {
  for (int64_t j = 0; j < cols; j += 2) dst[j / 2] = uint8_t((q[j] & 15) | ((q[j + 1] & 15) << 4));
}
inline int e2m1_unpack(const uint8_t* row, int64_t j) { return (row[j / 2] >> ((j & 1) * 4)) & 15; }

}  // namespace qt
