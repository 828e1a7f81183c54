// bf16 rounding exactly as the AVX512-BF16 instructions do it (VCVTNE2PS2BF16 pseudocode in the
// Intel SDM): round to nearest even, NaN kept quiet, and — unlike numpy/torch — zero and
// denormal inputs flushed to a signed zero (the instructions treat denormals as zero).
// Every bf16 path (scalar reference, AVX2 emulation, native AVX512-BF16) rounds with this rule,
// so they agree to fp32 summation order.
#pragma once
#include <cstdint>
#include <cstring>

namespace qt::kernels {

inline uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t ex = u & 0x7f800000u;
  if (ex == 0) return uint16_t((u >> 16) & 0x8000);                        // zero / denormal
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN → quiet
  if (ex == 0x7f800000u) return uint16_t(u >> 16);                         // ±inf
  u += 0x7fffu + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

inline float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The fp32 value an operand has after bf16 rounding.
inline float bf16_round_value(float f) { return bf16_to_float(round_bf16(f)); }

}  // namespace qt::kernels
