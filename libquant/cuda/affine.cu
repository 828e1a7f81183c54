// MLX affine weights (2–8 bits, any group) dequantized to bf16 rows for the bf16 GEMM: one layer's
// matrix at a time, right before its GEMM (weight-only quantization: the GEMM is compute-bound at
// prefill sizes, the decode of 0.5–1 byte per weight into 2 is a few percent of it). The value is
// mlx.core.dequantize's, as the CPU's (schemes/affine.cpp): w = round(round(q·s) + b) in the scales'
// dtype, then rounded to bf16 (exact when the scales are bf16).
#include <algorithm>

#include "libquant/cuda/affine.h"
#include "libquant/cuda/check.h"

namespace qt::cuda {
namespace {

__device__ __forceinline__ float round_mode(int mode, float v) {
  if (mode == 1) return __bfloat162float(__float2bfloat16_rn(v));
  if (mode == 2) return __half2float(__float2half_rn(v));
  return v;
}

__global__ void affine_dequant_kernel(const uint8_t* codes, const float* scales, const float* biases, int cols,
                                      int bits, int group, int mode, __nv_bfloat16* out) {
  const int64_t r = blockIdx.x;
  const int64_t row_bytes = int64_t(cols) * bits / 8;
  const uint8_t* row = codes + r * row_bytes;
  const int groups = cols / group;
  const uint32_t mask = (1u << bits) - 1;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const int64_t off = int64_t(j) * bits;
    const int b0 = int(off >> 3), sh = int(off & 7);
    uint32_t v = row[b0];
    if (sh + bits > 8) v |= uint32_t(row[b0 + 1]) << 8;
    const uint32_t q = (v >> sh) & mask;
    const float s = scales[r * groups + j / group], b = biases[r * groups + j / group];
    const float prod = round_mode(mode, __fmul_rn(float(q), s));
    out[r * cols + j] = __float2bfloat16_rn(round_mode(mode, __fadd_rn(prod, b)));
  }
}

// Two values per thread: byte i holds codes 2i (high nibble) and 2i + 1 (low nibble).
__global__ void bnb4_dequant_kernel(const uint8_t* codes, const float* absmax, const float* table, int64_t n_bytes,
                                    int block, __nv_bfloat16* out) {
  __shared__ float t[16];
  if (threadIdx.x < 16) t[threadIdx.x] = table[threadIdx.x];
  __syncthreads();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_bytes; i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t b = codes[i];
    const int64_t e = 2 * i;
    const float a0 = absmax[e / block], a1 = absmax[(e + 1) / block];
    __nv_bfloat162 v;
    v.x = __float2bfloat16_rn(__fmul_rn(t[b >> 4], a0));
    v.y = __float2bfloat16_rn(__fmul_rn(t[b & 15u], a1));
    reinterpret_cast<__nv_bfloat162*>(out)[i] = v;
  }
}

}  // namespace

void bnb4_dequant(const Bnb4Weight& w, __nv_bfloat16* out, cudaStream_t s) { bnb4_dequant_rows(w, 0, w.rows, out, s); }

void bnb4_dequant_rows(const Bnb4Weight& w, int64_t row0, int64_t rows, __nv_bfloat16* out, cudaStream_t s) {
  if (rows <= 0) return;
  const int64_t e0 = row0 * w.cols;  // the slice starts on a whole block (the loader checks)
  const int64_t n_bytes = rows * w.cols / 2;
  const int64_t blocks = std::min<int64_t>((n_bytes + 255) / 256, 132 * 16);
  bnb4_dequant_kernel<<<unsigned(blocks), 256, 0, s>>>(w.codes.get<uint8_t>() + e0 / 2,
                                                       w.absmax.get<float>() + e0 / w.block, w.table.get<float>(),
                                                       n_bytes, w.block, out);
  QT_CUDA_LAUNCHED();
}

void affine_dequant(const AffineWeight& w, __nv_bfloat16* out, cudaStream_t s) {
  affine_dequant_rows(w, 0, w.rows, out, s);
}

void affine_dequant_rows(const AffineWeight& w, int64_t row0, int64_t rows, __nv_bfloat16* out, cudaStream_t s) {
  if (rows <= 0) return;
  const int64_t row_bytes = int64_t(w.cols) * w.bits / 8, groups = w.cols / w.group;
  affine_dequant_kernel<<<unsigned(rows), 256, 0, s>>>(
      w.codes.get<uint8_t>() + row0 * row_bytes, w.scales.get<float>() + row0 * groups,
      w.biases.get<float>() + row0 * groups, w.cols, w.bits, w.group, w.round_mode, out);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
