// fp32 → bf16 (the attention output before the o projection); random words for bench --peak.
#include <algorithm>

#include "libquant/cuda/check.h"
#include "libquant/cuda/ops.h"

namespace qt::cuda {
namespace {
__global__ void to_bf16_kernel(const float* x, size_t n, bf16* y) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}
__global__ void fill_random_kernel(uint32_t* p, size_t n_words, uint32_t seed, uint32_t mask) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_words; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
    p[i] = x & mask;
  }
}
}  // namespace

void fill_random(uint32_t* p, size_t n_words, uint32_t seed, uint32_t mask, cudaStream_t s) {
  fill_random_kernel<<<1024, 256, 0, s>>>(p, n_words, seed, mask);
  QT_CUDA_LAUNCHED();
}

void to_bf16(const float* x, size_t n, bf16* y, cudaStream_t s) {
  if (!n) return;
  const int blocks = int(std::min<size_t>((n + 255) / 256, 132 * 32));
  to_bf16_kernel<<<blocks, 256, 0, s>>>(x, n, y);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
