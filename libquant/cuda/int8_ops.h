// The per-token 8-bit kernels (int8_ops.cu): activations quantized per token and the GEMM's
// epilogue, for W8A8 / W4A8 (int8 codes, int32 sums) and, as overloads of the same names, for
// FP8 (E4M3 codes, fp32 sums of the FP8 GEMM): the overload follows the pointer types.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qt::cuda {

using e4m3 = __nv_fp8_e4m3;

// RMSNorm of each row (the CPU's formula) quantized per token: q [rows, dim], sx [rows].
void rmsnorm_q8(const float* x, const float* w, int rows, int dim, float eps, int8_t* q, float* sx, cudaStream_t s);
// rmsnorm_q8 of the rows rmsnorm (ops.h) selects with group / group_stride / group_off (the output head's).
void rmsnorm_q8_rows(const float* x, const float* w, int rows, int dim, float eps, int group, int group_stride,
                     int group_off, int8_t* q, float* sx, cudaStream_t s);
// x [rows, dim] quantized per token.
void quant_rows(const float* x, int rows, int dim, int8_t* q, float* sx, cudaStream_t s);
// y [rows, out] (+)= sx[t] · (sw[n] · float(acc[t, n])).
void dequant(const int32_t* acc, int rows, int out, const float* sx, const float* sw, float* y, bool accumulate,
             cudaStream_t s);
// From the gate|up GEMM's int32 acc [rows, 2F]: h = silu(g)·u in fp32 (g, u dequantized with
// sx_in and sw [2F]), quantized per token into q [rows, F], sx_out [rows].
void swiglu_q8(const int32_t* acc, int rows, int F, const float* sx_in, const float* sw, int8_t* q, float* sx_out,
               cudaStream_t s);
bool swiglu_q8_fits(int F);
// Fused (the same values as dequant and rmsnorm_q8 one after the other):
// x += sx_acc · (sw · acc) (the o / down GEMM's residual add), then rmsnorm_q8 of the new x.
void residual_rmsnorm_q8(const int32_t* acc, const float* sx_acc, const float* sw, float* x, const float* w, int rows,
                         int dim, float eps, int8_t* q, float* sx, cudaStream_t s);
bool residual_rmsnorm_q8_fits(int dim);  // dim floats of shared memory per block
// rope_split (ops.h) of the q|k|v GEMM's int32 acc [n, Q + 2KV] dequantized on the fly (sx [n], sw [Q + 2KV]).
void rope_split_q8(const int32_t* acc, const float* sx, const float* sw, int n, int T, int nh, int nkv, int hd,
                   const float* cos, const float* sin, __half* q, __half* k, __half* v, cudaStream_t s);
// FP8: the same passes with E4M3 codes (s = absmax/448, schemes/fp8.cpp's rounding) and fp32 sums.
void rmsnorm_q8(const float* x, const float* w, int rows, int dim, float eps, e4m3* q, float* sx, cudaStream_t s);
void quant_rows(const float* x, int rows, int dim, e4m3* q, float* sx, cudaStream_t s);
void dequant(const float* acc, int rows, int out, const float* sx, const float* sw, float* y, bool accumulate,
             cudaStream_t s);
void swiglu_q8(const float* acc, int rows, int F, const float* sx_in, const float* sw, e4m3* q, float* sx_out,
               cudaStream_t s);
void residual_rmsnorm_q8(const float* acc, const float* sx_acc, const float* sw, float* x, const float* w, int rows,
                         int dim, float eps, e4m3* q, float* sx, cudaStream_t s);
void rope_split_q8(const float* acc, const float* sx, const float* sw, int n, int T, int nh, int nkv, int hd,
                   const float* cos, const float* sin, __half* q, __half* k, __half* v, cudaStream_t s);
// The norm, SwiGLU, per-token int8 and RoPE passes above run in 16-byte vectorized forms where
// their widths are multiples of 4 (and a row fits shared memory), in scalar ones otherwise: the
// same bits.

}  // namespace qt::cuda
