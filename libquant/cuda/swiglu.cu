// SwiGLU on the fused gate|up GEMM output: h = silu(g) · u as bf16 (the down projection's operand).
#include <algorithm>

#include "libquant/cuda/check.h"
#include "libquant/cuda/ops.h"

namespace qt::cuda {
namespace {
__global__ void swiglu_kernel(const float* gu, int64_t n_total, int F, bf16* h) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, c = i % F;
    const float g = gu[r * 2 * F + c], u = gu[r * 2 * F + F + c];
    h[i] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
  }
}
}  // namespace

void swiglu(const float* gu, int n, int F, bf16* h, cudaStream_t s) {
  const int64_t total = int64_t(n) * F;
  if (total <= 0) return;
  const int blocks = int(std::min<int64_t>((total + 255) / 256, 132 * 32));
  swiglu_kernel<<<blocks, 256, 0, s>>>(gu, total, F, h);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
