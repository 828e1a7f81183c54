// Causal softmax of attention scores, one warp per query row: max and Σexp over the keys up to the
// query's own position (within the sliding window where the layer has one) in fp32, probabilities written as f16 (zeros for the masked keys, so the
// P·V GEMM can run over the whole chunk). gpt_oss's sinks: the head's learned logit joins the max
// and the denominator and has no value (modeling_gpt_oss.py eager_attention_forward).
#include "libquant/cuda/check.h"
#include "libquant/cuda/ops.h"
#include "libquant/cuda/reduce.cuh"

namespace qt::cuda {
namespace {
constexpr int kWarps = 8;
__global__ void causal_softmax_kernel(const float* S, int64_t rows, int T, float scale, __half* P, int window,
                                      float cap, const float* sinks, int nh) {
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= rows) return;
  const int lane = threadIdx.x & 31, last = int(r % T), first = window > 0 ? max(0, last - window + 1) : 0;
  const float* s = S + r * T;
  __half* p = P + r * T;
  // the scaled score, soft-capped where the model caps it (the CPU's attention_masked)
  auto sc = [&](int j) { return cap > 0 ? tanhf(s[j] * scale / cap) * cap : s[j] * scale; };
  float m = -INFINITY;
  for (int j = first + lane; j <= last; j += 32) m = fmaxf(m, sc(j));
  m = warp_max(m);
  const float sink = sinks ? sinks[(r / T) % nh] : -INFINITY;  // rows are (chunk, head, query)
  m = fmaxf(m, sink);
  float sum = 0;
  for (int j = first + lane; j <= last; j += 32) sum += expf(sc(j) - m);
  sum = warp_sum(sum);
  if (sinks) sum += expf(sink - m);  // after the lanes' reduction: counted once
  const float inv = 1.0f / sum;
  for (int j = lane; j < T; j += 32) p[j] = __float2half_rn(j >= first && j <= last ? expf(sc(j) - m) * inv : 0.0f);
}
}  // namespace

void causal_softmax(const float* S, int64_t rows, int T, float scale, __half* P, cudaStream_t s, int window,
                    float softcap, const float* sinks, int nh) {
  if (rows <= 0) return;
  const int64_t blocks = (rows + kWarps - 1) / kWarps;
  causal_softmax_kernel<<<unsigned(blocks), 32 * kWarps, 0, s>>>(S, rows, T, scale, P, window, softcap, sinks, nh);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
