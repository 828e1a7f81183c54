// Embedding lookup: one block per token row, the table in its stored dtype (Gemma: times √hidden,
// a float32 constant, as transformers multiplies it).
#include "libquant/cuda/check.h"
#include "libquant/cuda/ops.h"

namespace qt::cuda {
namespace {
__device__ __forceinline__ float as_f32(float v) { return v; }
__device__ __forceinline__ float as_f32(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float as_f32(__half v) { return __half2float(v); }

template <typename T>
__global__ void embed_kernel(const int32_t* tok, const T* table, int H, float* x, float scale) {
  const T* src = table + size_t(tok[blockIdx.x]) * H;
  float* dst = x + size_t(blockIdx.x) * H;
  if (scale == 1.0f)
    for (int d = threadIdx.x; d < H; d += blockDim.x) dst[d] = as_f32(src[d]);
  else
    for (int d = threadIdx.x; d < H; d += blockDim.x) dst[d] = as_f32(src[d]) * scale;
}
}  // namespace

void embed(const int32_t* tok, int n, const void* table, int table_dtype, int H, float* x, cudaStream_t s,
           float scale) {
  if (n <= 0) return;
  if (table_dtype == 0)
    embed_kernel<<<n, 256, 0, s>>>(tok, static_cast<const float*>(table), H, x, scale);
  else if (table_dtype == 1)
    embed_kernel<<<n, 256, 0, s>>>(tok, static_cast<const bf16*>(table), H, x, scale);
  else
    embed_kernel<<<n, 256, 0, s>>>(tok, static_cast<const __half*>(table), H, x, scale);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
