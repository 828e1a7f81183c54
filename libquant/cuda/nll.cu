// Per-row NLL from fp32 logits: one block per row, max in fp32, Σexp(l − max) per thread in fp32
// and across threads in double, then log in double (the CPU's row_stats: float lanes, double combine).
#include "libquant/cuda/check.h"
#include "libquant/cuda/ops.h"
#include "libquant/cuda/reduce.cuh"

namespace qt::cuda {
namespace {
__global__ void nll_kernel(const float* logits, int V, const int32_t* target, double* nll) {
  __shared__ float shf[32];
  __shared__ double shd[32];
  const float* l = logits + int64_t(blockIdx.x) * V;
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, l[v]);
  m = block_max(m, shf);
  float s = 0;
  for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(l[v] - m);
  const double sum = block_sum(double(s), shd);
  if (threadIdx.x == 0) nll[blockIdx.x] = double(m) + log(sum) - double(l[target[blockIdx.x]]);
}
}  // namespace

void token_nll(const float* logits, int rows, int V, const int32_t* target, double* nll, cudaStream_t s) {
  if (rows <= 0) return;
  nll_kernel<<<rows, 512, 0, s>>>(logits, V, target, nll);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
