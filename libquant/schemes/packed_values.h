// How to read the numbers a PackedTensor stores (scheme.h), for the code that computes from the
// codes outside libquant/schemes (the packed Linears, the CUDA loader, tests) and for the
// quantizers themselves: the rounding of a scale to its stored float dtype, the group geometry of a
// row, and the value tables of the bitsandbytes 4-bit codes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "formats/tensor.h"
#include "libquant/schemes/scheme.h"

namespace qt::schemes_detail {

// Round an fp32 value to `t` (F32: unchanged; F16/BF16: round-to-nearest-even) and back.
inline float round_to(DType t, float v) {
  switch (t) {
    case DType::BF16: return bf16_to_f32(f32_to_bf16(v));
    case DType::F16: return f16_to_f32(f32_to_f16(v));
    default: return v;
  }
}

// Element i of a float tensor (F32/F16/BF16) as fp32.
inline float load_float(const Tensor& t, size_t i) {
  switch (t.dtype) {
    case DType::BF16: return bf16_to_f32(t.as<uint16_t>()[i]);
    case DType::F16: return f16_to_f32(t.as<uint16_t>()[i]);
    default: return t.as<float>()[i];
  }
}

// Groups of a row of `cols` values (per channel, group 0: one group of the whole row) and their length.
inline int64_t n_groups(const SchemeParams& p, int64_t cols) { return p.group_size == 0 ? 1 : cols / p.group_size; }
inline int64_t group_len(const SchemeParams& p, int64_t cols) { return p.group_size == 0 ? cols : p.group_size; }

// The value of an fp8 row's code (an E4M3 byte) under stored scale s: T(e4m3(code)·s) (fp8.cpp).
float fp8_value(int code, float s, DType T);

// bitsandbytes' 4-bit code tables (nf4.cpp, fp4.cpp): 16 values, index = code.
const float* nf4_table();
const float* fp4_table();

}  // namespace qt::schemes_detail
