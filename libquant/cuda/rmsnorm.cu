// RMSNorm, fp32 in, bf16 out (the next GEMM's operand) or fp32 (rows rounded before their GEMM):
// one block per row, the CPU's formula w · (x · 1/sqrt(Σx²/dim + eps)) with the sum of squares in fp32.
#include "libquant/cuda/check.h"
#include "libquant/cuda/ops.h"
#include "libquant/cuda/reduce.cuh"

namespace qt::cuda {
namespace {
__device__ __forceinline__ void put(bf16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void put(float* p, float v) { *p = v; }

template <typename Out>
__global__ void rmsnorm_kernel(const float* x, const float* w, Out* y, int dim, float eps, int group, int group_stride,
                               int group_off) {
  __shared__ float sh[32];
  const int r = blockIdx.x;
  const int64_t src = int64_t(r / group) * group_stride + group_off + r % group;
  const float* xr = x + src * dim;
  float ss = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) ss += xr[d] * xr[d];
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / float(dim) + eps);
  Out* yr = y + int64_t(r) * dim;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) put(yr + d, w[d] * (xr[d] * inv));
}
}  // namespace

void rmsnorm(const float* x, const float* w, bf16* y, int rows, int dim, float eps, int group, int group_stride,
             int group_off, cudaStream_t s) {
  if (rows <= 0) return;
  rmsnorm_kernel<<<rows, 256, 0, s>>>(x, w, y, dim, eps, group, group_stride, group_off);
  QT_CUDA_LAUNCHED();
}

void rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps, cudaStream_t s) {
  if (rows <= 0) return;
  rmsnorm_kernel<<<rows, 256, 0, s>>>(x, w, y, dim, eps, rows, 0, 0);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
