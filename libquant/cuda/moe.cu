// Routing and regrouping kernels of the GPU's mixture-of-experts FFN (moe.h).
#include "libquant/cuda/check.h"
#include "libquant/cuda/moe.h"

namespace qt::cuda {
namespace {

constexpr int kPerLane = kMoeMaxExperts / 32;

// (a, ia) before (b, ib) in torch.topk's order: larger value first, then the lower index.
__device__ __forceinline__ bool before(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

// One warp per token; lane l holds experts l, l + 32, ….
__global__ void route_kernel(const float* logits, int n, int E, int K, bool topk_first, bool renorm, int32_t* sel,
                             float* w, int32_t* counts) {
  const int t = int((int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x & 31;
  if (t >= n) return;
  const float* row = logits + int64_t(t) * E;
  float p[kPerLane];
  const int per = (E + 31) / 32;
  for (int q = 0; q < per; ++q) {
    const int e = lane + 32 * q;
    p[q] = e < E ? row[e] : -INFINITY;
  }
  if (!topk_first) {  // softmax over all experts in fp32
    float mx = -INFINITY;
    for (int q = 0; q < per; ++q) mx = fmaxf(mx, p[q]);
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0;
    for (int q = 0; q < per; ++q) {
      p[q] = lane + 32 * q < E ? expf(p[q] - mx) : 0.0f;
      sum += p[q];
    }
    for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int q = 0; q < per; ++q) p[q] /= sum;
  }
  // K rounds of a warp arg-max, each over the values after the previous pick in topk's order.
  float pv = INFINITY, top = 0;
  int pi = -1;
  float val[kMoeMaxTopK];
  int idx[kMoeMaxTopK];
  for (int j = 0; j < K; ++j) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int q = 0; q < per; ++q) {
      const int e = lane + 32 * q;
      if (e < E && before(pv, pi, p[q], e) && before(p[q], e, bv, bi)) bv = p[q], bi = e;
    }
    for (int o = 16; o; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (before(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    val[j] = bv, idx[j] = bi, pv = bv, pi = bi;
    top += bv;
  }
  if (lane != 0) return;
  if (topk_first) {           // softmax over the K picked logits (the first is the largest)
    const float mx = val[0];  // kept apart: the loop below overwrites val[0] first
    float s = 0;
    for (int j = 0; j < K; ++j) s += expf(val[j] - mx);
    for (int j = 0; j < K; ++j) val[j] = expf(val[j] - mx) / s;
  } else if (renorm) {
    for (int j = 0; j < K; ++j) val[j] = val[j] / top;
  }
  for (int j = 0; j < K; ++j) {
    sel[int64_t(t) * K + j] = idx[j];
    w[int64_t(t) * K + j] = val[j];
    atomicAdd(counts + idx[j], 1);
  }
}

__global__ void offsets_kernel(const int32_t* counts, int E, int32_t* offs) {
  int s = 0;
  for (int e = 0; e < E; ++e) offs[e] = s, s += (counts[e] + kMoeRowAlign - 1) / kMoeRowAlign * kMoeRowAlign;
  offs[E] = s;
}

// One block per expert: a block-wide scan over every pair in order, kItems pairs a thread per step,
// gives each of the expert's pairs its rank among them.
constexpr int kFillThreads = 1024, kItems = 4;
__global__ void fill_kernel(const int32_t* sel, int nk, const int32_t* offs, int32_t* slot) {
  const int e = blockIdx.x, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  __shared__ int warp_sum[kFillThreads / 32];
  int base = offs[e];
  for (int start = 0; start < nk; start += kFillThreads * kItems) {
    const int i0 = start + threadIdx.x * kItems;
    bool m[kItems];
    int c = 0;
    for (int q = 0; q < kItems; ++q) {
      m[q] = i0 + q < nk && sel[i0 + q] == e;
      c += m[q];
    }
    int incl = c;  // inclusive scan of c within the warp
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    if (lane == 31) warp_sum[wid] = incl;
    __syncthreads();
    int before_w = 0, total = 0;
    for (int x = 0; x < kFillThreads / 32; ++x) {
      const int v = warp_sum[x];
      before_w += x < wid ? v : 0;
      total += v;
    }
    int r = base + before_w + incl - c;
    for (int q = 0; q < kItems; ++q)
      if (m[q]) slot[i0 + q] = r++;
    base += total;
    __syncthreads();
  }
}

template <typename W>
__global__ void gather_kernel(const char* x, int K, int64_t words, const int32_t* slot, char* xg) {
  const int64_t i = blockIdx.x;  // pair (t, j) = (i / K, i % K)
  const W* src = reinterpret_cast<const W*>(x) + (i / K) * words;
  W* dst = reinterpret_cast<W*>(xg) + int64_t(slot[i]) * words;
  for (int64_t c = threadIdx.x; c < words; c += blockDim.x) dst[c] = src[c];
}

// One block per row in use: its expert by a binary search of the offsets.
__global__ void bias_kernel(float* y, int cols, const int32_t* offs, int E, const float* b) {
  const int r = blockIdx.x;
  int lo = 0, hi = E - 1;  // the last e with offs[e] <= r
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offs[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  float* o = y + int64_t(r) * cols;
  const float* be = b + int64_t(lo) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] += be[c];
}

__global__ void combine_kernel(const float* y, int K, int H, const int32_t* sel, const float* w, const int32_t* slot,
                               float* out, bool accumulate) {
  const int64_t t = blockIdx.x;
  __shared__ int s_e[kMoeMaxTopK], s_slot[kMoeMaxTopK];
  __shared__ float s_w[kMoeMaxTopK];
  if (threadIdx.x == 0) {  // the token's pairs by ascending expert (insertion sort of K ≤ 16)
    for (int j = 0; j < K; ++j) {
      const int e = sel[t * K + j], sl = slot[t * K + j];
      const float wj = w[t * K + j];
      int q = j;
      for (; q > 0 && s_e[q - 1] > e; --q) s_e[q] = s_e[q - 1], s_slot[q] = s_slot[q - 1], s_w[q] = s_w[q - 1];
      s_e[q] = e, s_slot[q] = sl, s_w[q] = wj;
    }
  }
  __syncthreads();
  float* o = out + t * H;
  for (int d = threadIdx.x; d < H; d += blockDim.x) {
    float a = 0;
    for (int j = 0; j < K; ++j) a += y[int64_t(s_slot[j]) * H + d] * s_w[j];
    o[d] = accumulate ? o[d] + a : a;
  }
}

}  // namespace

void moe_route(const float* logits, int n, int E, int K, bool topk_first, bool renorm, int32_t* sel, float* w,
               int32_t* counts, cudaStream_t s) {
  if (n <= 0) return;
  const int warps = 8;
  route_kernel<<<(n + warps - 1) / warps, warps * 32, 0, s>>>(logits, n, E, K, topk_first, renorm, sel, w, counts);
  QT_CUDA_LAUNCHED();
}

void moe_offsets(const int32_t* counts, int E, int32_t* offs, cudaStream_t s) {
  offsets_kernel<<<1, 1, 0, s>>>(counts, E, offs);
  QT_CUDA_LAUNCHED();
}

void moe_fill(const int32_t* sel, int nk, int E, const int32_t* offs, int32_t* slot, cudaStream_t s) {
  if (nk <= 0) return;
  fill_kernel<<<E, kFillThreads, 0, s>>>(sel, nk, offs, slot);
  QT_CUDA_LAUNCHED();
}

void moe_gather(const void* x, int n, int K, size_t row_bytes, const int32_t* slot, void* xg, cudaStream_t s) {
  if (n <= 0) return;
  const char* src = static_cast<const char*>(x);
  char* dst = static_cast<char*>(xg);
  const unsigned pairs = unsigned(int64_t(n) * K);
  if (row_bytes % 16 == 0)
    gather_kernel<uint4><<<pairs, 128, 0, s>>>(src, K, int64_t(row_bytes / 16), slot, dst);
  else if (row_bytes % 4 == 0)
    gather_kernel<uint32_t><<<pairs, 128, 0, s>>>(src, K, int64_t(row_bytes / 4), slot, dst);
  else
    gather_kernel<char><<<pairs, 128, 0, s>>>(src, K, int64_t(row_bytes), slot, dst);
  QT_CUDA_LAUNCHED();
}

void moe_bias(float* y, int rows_used, int cols, const int32_t* offs, int E, const float* b, cudaStream_t s) {
  if (rows_used <= 0 || !b) return;
  bias_kernel<<<rows_used, 128, 0, s>>>(y, cols, offs, E, b);
  QT_CUDA_LAUNCHED();
}

void moe_combine(const float* y, int n, int K, int H, const int32_t* sel, const float* w, const int32_t* slot,
                 float* out, bool accumulate, cudaStream_t s) {
  if (n <= 0) return;
  combine_kernel<<<n, 256, 0, s>>>(y, K, H, sel, w, slot, out, accumulate);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
