// RoPE (rotate-half, HF layout) on the fused q|k|v GEMM output, split into f16 q, k, v: one block
// per token row. The cos/sin tables are the CPU's (ops::RopeTable), so the angles are the same bits;
// without tables (a layer without RoPE) q and k pass through unrotated.
#include "libquant/cuda/check.h"
#include "libquant/cuda/ops.h"

namespace qt::cuda {
namespace {
__global__ void rope_split_kernel(const float* qkv, int T, int nh, int nkv, int hd, const float* cos_t,
                                  const float* sin_t, __half* q, __half* k, __half* v) {
  const int r = blockIdx.x, half = hd / 2, pos = r % T;
  const int Q = nh * hd, KV = nkv * hd;
  const float* in = qkv + int64_t(r) * (Q + 2 * KV);
  const float* c = cos_t ? cos_t + int64_t(pos) * half : nullptr;
  const float* s = sin_t ? sin_t + int64_t(pos) * half : nullptr;
  // q and k heads: pairs (i, i + half)
  for (int t = threadIdx.x; t < (nh + nkv) * half; t += blockDim.x) {
    const int h = t / half, i = t % half;
    const float* a = in + h * hd;  // k heads follow q heads in qkv
    const float x0 = a[i], x1 = a[i + half];
    const float y0 = c ? x0 * c[i] - x1 * s[i] : x0, y1 = c ? x1 * c[i] + x0 * s[i] : x1;
    __half* o = h < nh ? q + int64_t(r) * Q + h * hd : k + int64_t(r) * KV + (h - nh) * hd;
    o[i] = __float2half_rn(y0);
    o[i + half] = __float2half_rn(y1);
  }
  for (int t = threadIdx.x; t < KV; t += blockDim.x) v[int64_t(r) * KV + t] = __float2half_rn(in[Q + KV + t]);
}
}  // namespace

void rope_split(const float* qkv, int n, int T, int nh, int nkv, int hd, const float* cos, const float* sin, __half* q,
                __half* k, __half* v, cudaStream_t s) {
  if (n <= 0) return;
  rope_split_kernel<<<n, 256, 0, s>>>(qkv, T, nh, nkv, hd, cos, sin, q, k, v);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
