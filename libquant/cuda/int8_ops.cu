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

__global__ void rmsnorm_q8_kernel(const float* x, const float* w, int dim, float eps, int8_t* q, float* sx) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
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

}  // namespace

void rmsnorm_q8(const float* x, const float* w, int rows, int dim, float eps, int8_t* q, float* sx, cudaStream_t s) {
  if (rows <= 0) return;
  rmsnorm_q8_kernel<<<rows, 512, 0, s>>>(x, w, dim, eps, q, sx);
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

void swiglu_q8(const int32_t* acc, int rows, int F, const float* sx_in, const float* sw, int8_t* q, float* sx_out,
               cudaStream_t s) {
  if (rows <= 0) return;
  const size_t smem = size_t(F) * 4;
  QT_CUDA_CHECK(cudaFuncSetAttribute(swiglu_q8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  swiglu_q8_kernel<<<rows, 512, smem, s>>>(acc, F, sx_in, sw, q, sx_out);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
