// The block's pieces that only some families use (formats/arch.h's row): q/k/v biases (qwen2),
// RMSNorm of q and k before RoPE (qwen3 and gemma3 per head, OLMo 2 over the whole projection),
// the post-norms before the residual add (Gemma 2/3, OLMo 2), and the final-logit soft-cap
// (Gemma 2). The same formulas as the CPU's (libquant/model/llama.cpp, ops_gemma.cpp), in fp32.
#include <algorithm>

#include "libquant/cuda/check.h"
#include "libquant/cuda/ops.h"
#include "libquant/cuda/reduce.cuh"

namespace qt::cuda {
namespace {
__global__ void add_bias_kernel(float* y, const float* b, int64_t n, int cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += b[i % cols];
}

// One block per (row, segment): segments 0 … nq−1 are q's (qlen values each, from column 0), the
// next nk are k's (klen each, from column kcol); w_q / w_k hold one segment's weights.
__global__ void qk_norm_kernel(float* qkv, int64_t stride, int nq, int qlen, const float* wq, int nk, int klen,
                               int kcol, const float* wk, float eps) {
  __shared__ float sh[32];
  const int r = blockIdx.x, seg = blockIdx.y;
  const bool isq = seg < nq;
  const int len = isq ? qlen : klen;
  float* x = qkv + int64_t(r) * stride + (isq ? int64_t(seg) * qlen : kcol + int64_t(seg - nq) * klen);
  const float* w = isq ? wq : wk;
  float ss = 0;
  for (int d = threadIdx.x; d < len; d += blockDim.x) ss += x[d] * x[d];
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / float(len) + eps);
  for (int d = threadIdx.x; d < len; d += blockDim.x) x[d] = w[d] * (x[d] * inv);
}

__global__ void post_norm_add_kernel(const float* y, const float* w, float* x, int dim, float eps) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float* yr = y + r * dim;
  float* xr = x + r * dim;
  float ss = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) ss += yr[d] * yr[d];
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / float(dim) + eps);
  for (int d = threadIdx.x; d < dim; d += blockDim.x) xr[d] += w[d] * (yr[d] * inv);
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = tanhf(x[i] / cap) * cap;
}

unsigned grid_of(int64_t n) { return unsigned(std::min<int64_t>((n + 255) / 256, 65535)); }
}  // namespace

void add_bias(float* y, const float* b, int rows, int cols, cudaStream_t s) {
  const int64_t n = int64_t(rows) * cols;
  if (n <= 0) return;
  add_bias_kernel<<<grid_of(n), 256, 0, s>>>(y, b, n, cols);
  QT_CUDA_LAUNCHED();
}

void qk_norm(float* qkv, int rows, int64_t stride, int nq, int qlen, const float* wq, int nk, int klen, int kcol,
             const float* wk, float eps, cudaStream_t s) {
  if (rows <= 0) return;
  qk_norm_kernel<<<dim3(unsigned(rows), unsigned(nq + nk)), 128, 0, s>>>(qkv, stride, nq, qlen, wq, nk, klen, kcol, wk,
                                                                         eps);
  QT_CUDA_LAUNCHED();
}

void post_norm_add(const float* y, const float* w, float* x, int rows, int dim, float eps, cudaStream_t s) {
  if (rows <= 0) return;
  post_norm_add_kernel<<<rows, 256, 0, s>>>(y, w, x, dim, eps);
  QT_CUDA_LAUNCHED();
}

void softcap(float* x, int64_t n, float cap, cudaStream_t s) {
  if (n <= 0) return;
  softcap_kernel<<<grid_of(n), 256, 0, s>>>(x, n, cap);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
