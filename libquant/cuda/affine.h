// A weight stored as MLX affine codes on the GPU (affine.cu decodes it to bf16 per GEMM).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "libquant/cuda/buffer.h"

namespace qt::cuda {

struct AffineWeight {
  DeviceBuffer codes;           // [rows, cols·bits/8] bytes, each row an LSB-first bit stream
  DeviceBuffer scales, biases;  // fp32 [rows, cols/group] (widened from the stored dtype)
  int rows = 0, cols = 0, bits = 0, group = 0;
  int round_mode = 0;  // the stored scales' dtype, which dequantization rounds to: 0 f32, 1 bf16, 2 f16
  bool empty() const { return rows == 0; }
};

// out [rows, cols] bf16 = the dequantized weight.
void affine_dequant(const AffineWeight& w, __nv_bfloat16* out, cudaStream_t s);
// Rows row0 … row0 + rows − 1 only (one expert's slice of a stacked matrix) into out [rows, cols].
void affine_dequant_rows(const AffineWeight& w, int64_t row0, int64_t rows, __nv_bfloat16* out, cudaStream_t s);

// A weight stored as bitsandbytes NF4 / FP4 (schemes/bnb4.cpp): the flattened tensor's 4-bit
// codes, two per byte (high nibble first), and an fp32 absmax per block of `block` values;
// w = table[code] · absmax in fp32, rounded to bf16 (the CPU's dequantize, then bf16).
struct Bnb4Weight {
  DeviceBuffer codes;   // [rows·cols / 2] bytes
  DeviceBuffer absmax;  // fp32 [rows·cols / block]
  DeviceBuffer table;   // fp32 [16]
  int64_t rows = 0, cols = 0;
  int block = 0;
  bool empty() const { return rows == 0; }
};
void bnb4_dequant(const Bnb4Weight& w, __nv_bfloat16* out, cudaStream_t s);
// Rows row0 … row0 + rows − 1 only (row0 · cols a multiple of the block).
void bnb4_dequant_rows(const Bnb4Weight& w, int64_t row0, int64_t rows, __nv_bfloat16* out, cudaStream_t s);

}  // namespace qt::cuda
