// Per-row KL divergence of the test model's next-token distribution against the baseline's, from
// both models' fp32 logits on the GPU (kld.h's kld_token, the CPU's formula): lse of each row, the
// two NLLs, Σ exp(l_b − lse_b) · ((l_b − l_t) − (lse_b − lse_t)) and whether the argmaxes (first
// index of the maximum) agree. One block per row; per-thread sums in fp32 terms, combined in double.
#include "libquant/cuda/check.h"
#include "libquant/cuda/ops.h"
#include "libquant/cuda/reduce.cuh"

namespace qt::cuda {
namespace {

// max and the first index holding it, across the block (sh: 32 floats and 32 ints)
__device__ void block_argmax(float& v, int& idx, float* shv, int* shi) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) v = ov, idx = oi;
  }
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) shv[w] = v, shi[w] = idx;
  __syncthreads();
  v = lane < nw ? shv[lane] : -INFINITY;
  idx = lane < nw ? shi[lane] : 0x7fffffff;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) v = ov, idx = oi;
  }
}

__global__ void kld_kernel(const float* base, const float* test, int V, const int32_t* target, KldRow* out) {
  __shared__ float shv[32];
  __shared__ int shi[32];
  __shared__ double shd[32];
  const float* b = base + int64_t(blockIdx.x) * V;
  const float* t = test + int64_t(blockIdx.x) * V;
  float mb = -INFINITY, mt = -INFINITY;
  int ib = 0x7fffffff, it = 0x7fffffff;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    if (b[v] > mb) mb = b[v], ib = v;
    if (t[v] > mt) mt = t[v], it = v;
  }
  block_argmax(mb, ib, shv, shi);
  block_argmax(mt, it, shv, shi);
  float sb = 0, st = 0;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    sb += expf(b[v] - mb);
    st += expf(t[v] - mt);
  }
  const double lse_b = double(mb) + log(block_sum(double(sb), shd));
  const double lse_t = double(mt) + log(block_sum(double(st), shd));
  const float lb = float(lse_b), c = float(lse_b - lse_t);
  double k = 0;
  for (int v = threadIdx.x; v < V; v += blockDim.x) k += double(expf(b[v] - lb) * ((b[v] - t[v]) - c));
  k = block_sum(k, shd);
  if (threadIdx.x == 0) {
    const int y = target[blockIdx.x];
    out[blockIdx.x] = {lse_t - double(t[y]), lse_b - double(b[y]), k, ib == it ? 1.0 : 0.0};
  }
}

}  // namespace

void kld_rows(const float* base, const float* test, int rows, int V, const int32_t* target, KldRow* out,
              cudaStream_t s) {
  if (rows <= 0) return;
  kld_kernel<<<rows, 512, 0, s>>>(base, test, V, target, out);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
