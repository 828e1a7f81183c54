// A weight stored as MLX affine codes on the GPU (affine.cu decodes it to bf16 per GEMM).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

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

}  // namespace qt::cuda
