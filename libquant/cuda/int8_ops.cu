// The W8A8 path's kernels: per-token int8 activation quantization (fused into the RMSNorm before
// a projection, into SwiGLU before the down projection, or alone for the attention output) and
// the int32 → fp32 epilogue. The formulas are the CPU's (schemes/int8.cpp, int_linear.cpp):
// s = absmax/127 (1 for a zero row), q = clamp(rint(x · (1/s)), −128, 127), and
// y = s_x · (s_w · float(acc)) — the int32 sums are exact, so only the fp32 steps can differ.
#include <algorithm>

#include "libquant/cuda/check.h"
#include "libquant/cuda/int8_ops.h"
#include "libquant/cuda/reduce.cuh"

namespace qt::cuda {
namespace {

__device__ __forceinline__ int8_t q8(float v, float inv) {
  return int8_t(fminf(fmaxf(rintf(v * inv), -128.0f), 127.0f));
}
// sx · (sw · acc), each product rounded (no contraction into an FMA with a following add).
__device__ __forceinline__ float deq(float sx, float sw, int32_t acc) {
  return __fmul_rn(sx, __fmul_rn(sw, float(acc)));
}
__device__ __forceinline__ float scale_of(float amax) {
  const float s = amax / 127.0f;
  return s == 0.0f ? 1.0f : s;
}

// Row r reads x row (r / group)·group_stride + group_off + r % group (rmsnorm's selection: the
// scored rows of each chunk for the output head; group = rows, stride 0, off 0: every row).
__global__ void rmsnorm_q8_kernel(const float* x, const float* w, int dim, float eps, int8_t* q, float* sx, int group,
                                  int group_stride, int group_off) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + (int64_t(r / group) * group_stride + group_off + r % group) * dim;
  float ss = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) ss += xr[d] * xr[d];
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / float(dim) + eps);
  float amax = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) amax = fmaxf(amax, fabsf(w[d] * (xr[d] * inv)));
  const float s = scale_of(block_max(amax, sh));
  const float qi = 1.0f / s;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) q[r * dim + d] = q8(w[d] * (xr[d] * inv), qi);
  if (threadIdx.x == 0) sx[r] = s;
}

__global__ void quant_rows_kernel(const float* x, int dim, int8_t* q, float* sx) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  float amax = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) amax = fmaxf(amax, fabsf(xr[d]));
  const float s = scale_of(block_max(amax, sh));
  const float qi = 1.0f / s;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) q[r * dim + d] = q8(xr[d], qi);
  if (threadIdx.x == 0) sx[r] = s;
}

// One block per row (no index division); four columns per thread and step when out % 4 == 0.
__global__ void dequant_kernel(const int32_t* acc, int out, const float* sx, const float* sw, float* y,
                               bool accumulate) {
  const int64_t r = blockIdx.x;
  const float s = sx[r];
  const int32_t* a = acc + r * out;
  float* yr = y + r * out;
  if (out % 4 == 0) {
    for (int c = threadIdx.x * 4; c < out; c += blockDim.x * 4) {
      const int4 q = *reinterpret_cast<const int4*>(a + c);
      const float4 w = *reinterpret_cast<const float4*>(sw + c);
      float4 v = make_float4(deq(s, w.x, q.x), deq(s, w.y, q.y), deq(s, w.z, q.z), deq(s, w.w, q.w));
      if (accumulate) {
        const float4 o = *reinterpret_cast<const float4*>(yr + c);
        v = make_float4(__fadd_rn(o.x, v.x), __fadd_rn(o.y, v.y), __fadd_rn(o.z, v.z), __fadd_rn(o.w, v.w));
      }
      *reinterpret_cast<float4*>(yr + c) = v;
    }
    return;
  }
  for (int c = threadIdx.x; c < out; c += blockDim.x) {
    const float v = deq(s, sw[c], a[c]);
    yr[c] = accumulate ? __fadd_rn(yr[c], v) : v;
  }
}

// One block per row; h = silu(g)·u held in shared memory (F floats) between the absmax and the
// quantization.
__global__ void swiglu_q8_kernel(const int32_t* acc, int F, const float* sx_in, const float* sw, int8_t* q,
                                 float* sx_out) {
  extern __shared__ float h[];
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const int32_t* a = acc + r * 2 * F;
  const float s_in = sx_in[r];
  float amax = 0;
  for (int c = threadIdx.x; c < F; c += blockDim.x) {
    const float g = deq(s_in, sw[c], a[c]), u = deq(s_in, sw[F + c], a[F + c]);
    const float v = g / (1.0f + expf(-g)) * u;
    h[c] = v;
    amax = fmaxf(amax, fabsf(v));
  }
  const float s = scale_of(block_max(amax, sh));  // block_max synchronizes: h is complete
  const float qi = 1.0f / s;
  for (int c = threadIdx.x; c < F; c += blockDim.x) q[r * F + c] = q8(h[c], qi);
  if (threadIdx.x == 0) sx_out[r] = s;
}

// The residual add of the previous o / down GEMM (x += sx·(sw·acc), as dequant with accumulate)
// and the next RMSNorm + per-token int8 (as rmsnorm_q8_kernel, same loops and block size, the
// new row from shared memory): one pass over x instead of dequant's and the norm's.
__global__ void residual_rmsnorm_q8_kernel(const int32_t* acc, const float* sx_acc, const float* sw, float* x,
                                           const float* w, int dim, float eps, int8_t* q, float* sx) {
  extern __shared__ float xs[];
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float s_acc = sx_acc[r];
  const int32_t* a = acc + r * dim;
  float* xr = x + r * dim;
  float ss = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    const float v = __fadd_rn(xr[d], deq(s_acc, sw[d], a[d]));
    xr[d] = v;
    xs[d] = v;
    ss += v * v;
  }
  ss = block_sum(ss, sh);  // synchronizes: every thread has read sx_acc[r] before sx[r] is written
  const float inv = 1.0f / sqrtf(ss / float(dim) + eps);
  float amax = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) amax = fmaxf(amax, fabsf(w[d] * (xs[d] * inv)));
  const float s = scale_of(block_max(amax, sh));
  const float qi = 1.0f / s;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) q[r * dim + d] = q8(w[d] * (xs[d] * inv), qi);
  if (threadIdx.x == 0) sx[r] = s;
}

// rope_split (rope.cu) reading the q|k|v GEMM's int32 sums through the epilogue: the same
// values dequant would have written, without the fp32 round trip.
__global__ void rope_split_q8_kernel(const int32_t* acc, const float* sx, const float* sw, int T, int nh, int nkv,
                                     int hd, const float* cos_t, const float* sin_t, __half* q, __half* k, __half* v,
                                     float* q32, float* k32, float* v32) {
  const int r = blockIdx.x, half = hd / 2, pos = r % T;
  const int Q = nh * hd, KV = nkv * hd;
  const int32_t* in = acc + int64_t(r) * (Q + 2 * KV);
  const float s_in = sx[r];
  const float* c = cos_t + int64_t(pos) * half;
  const float* s = sin_t + int64_t(pos) * half;
  for (int t = threadIdx.x; t < (nh + nkv) * half; t += blockDim.x) {
    const int h = t / half, i = t % half, j = h * hd + i;
    const float x0 = deq(s_in, sw[j], in[j]), x1 = deq(s_in, sw[j + half], in[j + half]);
    const float y0 = x0 * c[i] - x1 * s[i], y1 = x1 * c[i] + x0 * s[i];
    __half* o = h < nh ? q + int64_t(r) * Q + h * hd : k + int64_t(r) * KV + (h - nh) * hd;
    o[i] = __float2half_rn(y0);
    o[i + half] = __float2half_rn(y1);
    if (q32) {
      float* o32 = h < nh ? q32 + int64_t(r) * Q + h * hd : k32 + int64_t(r) * KV + (h - nh) * hd;
      o32[i] = h < nh ? y0 : __half2float(__float2half_rn(y0));
      o32[i + half] = h < nh ? y1 : __half2float(__float2half_rn(y1));
    }
  }
  for (int t = threadIdx.x; t < KV; t += blockDim.x) {
    const float x = deq(s_in, sw[Q + KV + t], in[Q + KV + t]);
    v[int64_t(r) * KV + t] = __float2half_rn(x);
    if (v32) v32[int64_t(r) * KV + t] = __half2float(__float2half_rn(x));
  }
}

}  // namespace

void residual_rmsnorm_q8(const int32_t* acc, const float* sx_acc, const float* sw, float* x, const float* w, int rows,
                         int dim, float eps, int8_t* q, float* sx, cudaStream_t s) {
  if (rows <= 0) return;
  const size_t smem = size_t(dim) * 4;
  QT_CUDA_CHECK(cudaFuncSetAttribute(residual_rmsnorm_q8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  residual_rmsnorm_q8_kernel<<<rows, 512, smem, s>>>(acc, sx_acc, sw, x, w, dim, eps, q, sx);
  QT_CUDA_LAUNCHED();
}

void rope_split_q8(const int32_t* acc, const float* sx, const float* sw, int n, int T, int nh, int nkv, int hd,
                   const float* cos, const float* sin, __half* q, __half* k, __half* v, cudaStream_t s, float* q32,
                   float* k32, float* v32) {
  if (n <= 0) return;
  rope_split_q8_kernel<<<n, 256, 0, s>>>(acc, sx, sw, T, nh, nkv, hd, cos, sin, q, k, v, q32, k32, v32);
  QT_CUDA_LAUNCHED();
}

void rmsnorm_q8(const float* x, const float* w, int rows, int dim, float eps, int8_t* q, float* sx, cudaStream_t s) {
  if (rows <= 0) return;
  rmsnorm_q8_kernel<<<rows, 512, 0, s>>>(x, w, dim, eps, q, sx, rows, 0, 0);
  QT_CUDA_LAUNCHED();
}

void rmsnorm_q8_rows(const float* x, const float* w, int rows, int dim, float eps, int group, int group_stride,
                     int group_off, int8_t* q, float* sx, cudaStream_t s) {
  if (rows <= 0) return;
  rmsnorm_q8_kernel<<<rows, 512, 0, s>>>(x, w, dim, eps, q, sx, group, group_stride, group_off);
  QT_CUDA_LAUNCHED();
}

void quant_rows(const float* x, int rows, int dim, int8_t* q, float* sx, cudaStream_t s) {
  if (rows <= 0) return;
  quant_rows_kernel<<<rows, 512, 0, s>>>(x, dim, q, sx);
  QT_CUDA_LAUNCHED();
}

void dequant(const int32_t* acc, int rows, int out, const float* sx, const float* sw, float* y, bool accumulate,
             cudaStream_t s) {
  if (rows <= 0 || out <= 0) return;
  dequant_kernel<<<rows, 256, 0, s>>>(acc, out, sx, sw, y, accumulate);
  QT_CUDA_LAUNCHED();
}

bool swiglu_q8_fits(int F) {
  int dev = 0, optin = 0;
  QT_CUDA_CHECK(cudaGetDevice(&dev));
  QT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return size_t(F) * 4 + 256 <= size_t(optin);
}

bool residual_rmsnorm_q8_fits(int dim) { return swiglu_q8_fits(dim); }

void swiglu_q8(const int32_t* acc, int rows, int F, const float* sx_in, const float* sw, int8_t* q, float* sx_out,
               cudaStream_t s) {
  if (rows <= 0) return;
  const size_t smem = size_t(F) * 4;
  QT_CUDA_CHECK(cudaFuncSetAttribute(swiglu_q8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  swiglu_q8_kernel<<<rows, 512, smem, s>>>(acc, F, sx_in, sw, q, sx_out);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
