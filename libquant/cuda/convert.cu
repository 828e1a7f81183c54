// fp32 → bf16 (the attention output before the o projection).
#include <algorithm>

#include "libquant/cuda/check.h"
#include "libquant/cuda/ops.h"

namespace qt::cuda {
namespace {
__global__ void to_bf16_kernel(const float* x, size_t n, bf16* y) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}
}  // namespace

void to_bf16(const float* x, size_t n, bf16* y, cudaStream_t s) {
  if (!n) return;
  const int blocks = int(std::min<size_t>((n + 255) / 256, 132 * 32));
  to_bf16_kernel<<<blocks, 256, 0, s>>>(x, n, y);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
