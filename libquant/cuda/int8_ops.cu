// The per-token 8-bit path's kernels: per-token activation quantization (fused into the RMSNorm
// before a projection, into SwiGLU before the down projection, or alone for the attention output)
// and the epilogue of the GEMM's sums. Two activation formats run the same kernels (a policy P):
//   I8 (W8A8 / W4A8; schemes/int8.cpp, int_linear.cpp): s = absmax/127 (1 for a zero row),
//      q = clamp(rint(x · (1/s)), −128, 127); int32 sums (exact).
//   F8 (FP8_DYNAMIC; schemes/fp8.cpp quantize_token_fp8, fp8_linear.cpp): s = absmax/448
//      (fp32 eps for a zero row), q = e4m3(clamp(x / s, ±448)) with e4m3.h's rounding (nearest,
//      ties to even); fp32 sums of the E4M3 products from the FP8 tensor cores.
// Both: y = s_x · (s_w · float(acc)), each product rounded, so only the sums' order can differ.
#include <algorithm>

#include "libquant/cuda/check.h"
#include "libquant/cuda/int8_ops.h"
#include "libquant/cuda/q8_math.cuh"
#include "libquant/cuda/reduce.cuh"
#include "libquant/schemes/e4m3.h"

namespace qt::cuda {
namespace {

__device__ __forceinline__ int8_t q8(float v, float inv) {
  return int8_t(fminf(fmaxf(rintf(v * inv), -128.0f), 127.0f));
}
// q8 rounding and converting in one instruction (cvt.rni, ties to even as rintf), clamped as integers.
__device__ __forceinline__ int8_t q8_rni(float v, float inv) {
  return int8_t(min(max(__float2int_rn(v * inv), -128), 127));
}

struct I8 {
  using Code = int8_t;
  using Code4 = char4;
  using Acc = int32_t;
  using Acc4 = int4;
  static __device__ __forceinline__ float scale(float amax) {
    const float s = amax / 127.0f;
    return s == 0.0f ? 1.0f : s;
  }
  static __device__ __forceinline__ Code code(float v, float, float inv) { return q8(v, inv); }
  static __device__ __forceinline__ Code code_rni(float v, float, float inv) { return q8_rni(v, inv); }
  static __device__ __forceinline__ Code4 pack(Code a, Code b, Code c, Code d) { return make_char4(a, b, c, d); }
};

struct F8 {
  using Code = uint8_t;  // E4M3 bits
  using Code4 = uchar4;
  using Acc = float;
  using Acc4 = float4;
  static __device__ __forceinline__ float scale(float amax) {
    const float s = amax / 448.0f;
    return s == 0.0f ? 1.1920928955078125e-07f : s;  // torch.finfo(float32).eps, as quantize_token_fp8
  }
  // The CPU's code: the IEEE quotient v / s plus 0 (−0 → +0), clamped, then e4m3.h's rounding
  // (nearest, ties to even: what the FP8 conversion instruction does, cvt.rn.satfinite.e4m3x2).
  static __device__ __forceinline__ Code exact(float v, float s) {
    const float y = __fadd_rn(__fdiv_rn(v, s), 0.0f);
    return e4m3_from_f32(fminf(fmaxf(y, -448.0f), 448.0f));
  }
  // The same code without the division where it can be told without it: y = v · inv (inv = 1/s
  // rounded) lies within 2^-22·|y| of the rounded quotient (y normal), so that quotient lies between
  // y·(1 − 2^-20) and y·(1 + 2^-20); where the conversion (monotonic; saturating as the clamp does up
  // to 449) gives both ends one code, that is the quotient's. Else — y within a few fp32 ulps of a
  // rounding boundary between two codes (rare), below 2^-60 or not finite (1/s overflowing) — the
  // division decides. The two ends convert in one instruction.
  static __device__ __forceinline__ Code code(float v, float s, float inv) {
    if (v == 0.0f) return 0;  // (±0 / s) + 0 = +0
    const float y = __fmul_rn(v, inv), a = fabsf(y);
    const unsigned short both = __nv_cvt_float2_to_fp8x2(
        make_float2(__fmul_rn(y, 1.0f - 0x1p-20f), __fmul_rn(y, 1.0f + 0x1p-20f)), __NV_SATFINITE, __NV_E4M3);
    if (a >= 0x1p-60f && a <= 449.0f && (both & 0xffu) == (both >> 8)) return Code(both & 0xffu);
    return exact(v, s);
  }
  static __device__ __forceinline__ Code code_rni(float v, float s, float inv) { return code(v, s, inv); }
  static __device__ __forceinline__ Code4 pack(Code a, Code b, Code c, Code d) { return make_uchar4(a, b, c, d); }
};

// Row r reads x row (r / group)·group_stride + group_off + r % group (rmsnorm's selection: the
// scored rows of each chunk for the output head; group = rows, stride 0, off 0: every row).
template <class P>
__global__ void rmsnorm_q8_kernel(const float* x, const float* w, int dim, float eps, typename P::Code* q, float* sx,
                                  int group, int group_stride, int group_off) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + (int64_t(r / group) * group_stride + group_off + r % group) * dim;
  float ss = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) ss += xr[d] * xr[d];
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / float(dim) + eps);
  float amax = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) amax = fmaxf(amax, fabsf(w[d] * (xr[d] * inv)));
  const float s = P::scale(block_max(amax, sh));
  const float qi = 1.0f / s;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) q[r * dim + d] = P::code(w[d] * (xr[d] * inv), s, qi);
  if (threadIdx.x == 0) sx[r] = s;
}

template <class P>
__global__ void quant_rows_kernel(const float* x, int dim, typename P::Code* q, float* sx) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  float amax = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) amax = fmaxf(amax, fabsf(xr[d]));
  const float s = P::scale(block_max(amax, sh));
  const float qi = 1.0f / s;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) q[r * dim + d] = P::code(xr[d], s, qi);
  if (threadIdx.x == 0) sx[r] = s;
}

// One block per row (no index division); four columns per thread and step when out % 4 == 0.
template <class P>
__global__ void dequant_kernel(const typename P::Acc* acc, int out, const float* sx, const float* sw, float* y,
                               bool accumulate) {
  const int64_t r = blockIdx.x;
  const float s = sx[r];
  const typename P::Acc* a = acc + r * out;
  float* yr = y + r * out;
  if (out % 4 == 0) {
    for (int c = threadIdx.x * 4; c < out; c += blockDim.x * 4) {
      const typename P::Acc4 q = *reinterpret_cast<const typename P::Acc4*>(a + c);
      const float4 w = *reinterpret_cast<const float4*>(sw + c);
      float4 v = make_float4(deq(s, w.x, q.x), deq(s, w.y, q.y), deq(s, w.z, q.z), deq(s, w.w, q.w));
      if (accumulate) {
        const float4 o = *reinterpret_cast<const float4*>(yr + c);
        v = make_float4(__fadd_rn(o.x, v.x), __fadd_rn(o.y, v.y), __fadd_rn(o.z, v.z), __fadd_rn(o.w, v.w));
      }
      *reinterpret_cast<float4*>(yr + c) = v;
    }
    return;
  }
  for (int c = threadIdx.x; c < out; c += blockDim.x) {
    const float v = deq(s, sw[c], a[c]);
    yr[c] = accumulate ? __fadd_rn(yr[c], v) : v;
  }
}

// One block per row; h = silu(g)·u held in shared memory (F floats) between the absmax and the
// quantization.
template <class P>
__global__ void swiglu_q8_kernel(const typename P::Acc* acc, int F, const float* sx_in, const float* sw,
                                 typename P::Code* q, float* sx_out) {
  extern __shared__ float h[];
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const typename P::Acc* a = acc + r * 2 * F;
  const float s_in = sx_in[r];
  float amax = 0;
  for (int c = threadIdx.x; c < F; c += blockDim.x) {
    const float g = deq(s_in, sw[c], a[c]), u = deq(s_in, sw[F + c], a[F + c]);
    const float v = g / (1.0f + expf(-g)) * u;
    h[c] = v;
    amax = fmaxf(amax, fabsf(v));
  }
  const float s = P::scale(block_max(amax, sh));  // block_max synchronizes: h is complete
  const float qi = 1.0f / s;
  for (int c = threadIdx.x; c < F; c += blockDim.x) q[r * F + c] = P::code(h[c], s, qi);
  if (threadIdx.x == 0) sx_out[r] = s;
}

// The residual add of the previous o / down GEMM (x += sx·(sw·acc), as dequant with accumulate)
// and the next RMSNorm + per-token int8 (as rmsnorm_q8_kernel, same loops and block size, the
// new row from shared memory): one pass over x instead of dequant's and the norm's.
template <class P>
__global__ void residual_rmsnorm_q8_kernel(const typename P::Acc* acc, const float* sx_acc, const float* sw, float* x,
                                           const float* w, int dim, float eps, typename P::Code* q, float* sx) {
  extern __shared__ float xs[];
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float s_acc = sx_acc[r];
  const typename P::Acc* a = acc + r * dim;
  float* xr = x + r * dim;
  float ss = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    const float v = __fadd_rn(xr[d], deq(s_acc, sw[d], a[d]));
    xr[d] = v;
    xs[d] = v;
    ss += v * v;
  }
  ss = block_sum(ss, sh);  // synchronizes: every thread has read sx_acc[r] before sx[r] is written
  const float inv = 1.0f / sqrtf(ss / float(dim) + eps);
  float amax = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) amax = fmaxf(amax, fabsf(w[d] * (xs[d] * inv)));
  const float s = P::scale(block_max(amax, sh));
  const float qi = 1.0f / s;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) q[r * dim + d] = P::code(w[d] * (xs[d] * inv), s, qi);
  if (threadIdx.x == 0) sx[r] = s;
}

// rope_split (rope.cu) reading the q|k|v GEMM's int32 sums through the epilogue: the same
// values dequant would have written, without the fp32 round trip.
template <class P>
__global__ void rope_split_q8_kernel(const typename P::Acc* acc, const float* sx, const float* sw, int T, int nh,
                                     int nkv, int hd, const float* cos_t, const float* sin_t, __half* q, __half* k,
                                     __half* v) {
  const int r = blockIdx.x, half = hd / 2, pos = r % T;
  const int Q = nh * hd, KV = nkv * hd;
  const typename P::Acc* in = acc + int64_t(r) * (Q + 2 * KV);
  const float s_in = sx[r];
  const float* c = cos_t + int64_t(pos) * half;
  const float* s = sin_t + int64_t(pos) * half;
  for (int t = threadIdx.x; t < (nh + nkv) * half; t += blockDim.x) {
    const int h = t / half, i = t % half, j = h * hd + i;
    const float x0 = deq(s_in, sw[j], in[j]), x1 = deq(s_in, sw[j + half], in[j + half]);
    float y0 = x0, y1 = x1;
    rope_pair(y0, y1, c[i], s[i]);
    __half* o = h < nh ? q + int64_t(r) * Q + h * hd : k + int64_t(r) * KV + (h - nh) * hd;
    o[i] = __float2half_rn(y0);
    o[i + half] = __float2half_rn(y1);
  }
  for (int t = threadIdx.x; t < KV; t += blockDim.x)
    v[int64_t(r) * KV + t] = __float2half_rn(deq(s_in, sw[Q + KV + t], in[Q + KV + t]));
}

// ---- Vectorized forms: 16-byte loads and stores, so that each SM keeps enough bytes in
// flight to run these passes at the HBM's rate (the scalar forms above reached 2.1–2.4 TB/s of the
// 3 TB/s). Same formulas, element for element; a block's reductions see the same values (max is
// exact, the RMSNorm's sum of squares runs in the scalar kernels' order): the same bits as the
// scalar forms. Used where the width is a multiple of 4 (every model here); the scalar forms
// are the fallback for other widths.
template <class P>
__device__ __forceinline__ typename P::Code4 q8x4(float4 v, float s, float inv) {
  return P::pack(P::code(v.x, s, inv), P::code(v.y, s, inv), P::code(v.z, s, inv), P::code(v.w, s, inv));
}
__device__ __forceinline__ float amax4(float m, float4 v) {
  return fmaxf(fmaxf(fmaxf(m, fabsf(v.x)), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
}
template <typename A4>
__device__ __forceinline__ float4 deq4(float sx, float4 w, A4 a) {
  return make_float4(deq(sx, w.x, a.x), deq(sx, w.y, a.y), deq(sx, w.z, a.z), deq(sx, w.w, a.w));
}

// swiglu_q8_kernel, four columns per thread and step; h in shared memory (F floats); the scalar
// kernel's bits (silu_mul, q8_math.cuh); the int8 codes through q8_rni. Of the exact forms timed on
// the 8B shape (512 or 1024 threads, with or without silu_mul's shortcut), this one was the fastest.
template <class P>
__global__ void __launch_bounds__(1024)
    swiglu_q8_v4_kernel(const typename P::Acc* __restrict__ acc, int F, const float* __restrict__ sx_in,
                        const float* __restrict__ sw, typename P::Code* __restrict__ q, float* __restrict__ sx_out) {
  extern __shared__ float4 h4[];
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const int F4 = F / 4;
  using A4 = typename P::Acc4;
  const A4* g = reinterpret_cast<const A4*>(acc + r * 2 * F);
  const A4* u = g + F4;
  const float4* wg = reinterpret_cast<const float4*>(sw);
  const float4* wu = wg + F4;
  const float s_in = sx_in[r];
  float amax = 0;
#pragma unroll 4
  for (int c = threadIdx.x; c < F4; c += blockDim.x) {
    const A4 a = __ldcs(g + c), b = __ldcs(u + c);
    const float4 x = deq4(s_in, __ldg(wg + c), a), y = deq4(s_in, __ldg(wu + c), b);
    const float4 v = make_float4(silu_mul(x.x, y.x), silu_mul(x.y, y.y), silu_mul(x.z, y.z), silu_mul(x.w, y.w));
    h4[c] = v;
    amax = amax4(amax, v);
  }
  const float s = P::scale(block_max(amax, sh));  // block_max synchronizes: h is complete
  const float qi = 1.0f / s;
  typename P::Code4* o = reinterpret_cast<typename P::Code4*>(q + r * F);
  for (int c = threadIdx.x; c < F4; c += blockDim.x) {
    const float4 v = h4[c];
    o[c] = P::pack(P::code_rni(v.x, s, qi), P::code_rni(v.y, s, qi), P::code_rni(v.z, s, qi), P::code_rni(v.w, s, qi));
  }
  if (threadIdx.x == 0) sx_out[r] = s;
}

// The RMSNorm + int8 of one row held in shared memory (xs, dim floats), four columns per thread and
// step — but the sum of squares read back one column per thread and step, as the scalar kernels
// sum it (same block size, 512): the same sum, bit for bit, so the same codes.
template <class P>
__device__ __forceinline__ void norm_q8_row_v4(const float4* xs, const float4* w, int dim4, float eps, int dim,
                                               typename P::Code4* q, float* sx, float* sh) {
  __syncthreads();
  const float* x1 = reinterpret_cast<const float*>(xs);
  float ss = 0;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) ss += x1[d] * x1[d];
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / float(dim) + eps);
  float amax = 0;
  for (int d = threadIdx.x; d < dim4; d += blockDim.x) {
    const float4 x = xs[d], ww = __ldg(w + d);
    amax = amax4(amax, make_float4(ww.x * (x.x * inv), ww.y * (x.y * inv), ww.z * (x.z * inv), ww.w * (x.w * inv)));
  }
  const float s = P::scale(block_max(amax, sh));
  const float qi = 1.0f / s;
  for (int d = threadIdx.x; d < dim4; d += blockDim.x) {
    const float4 x = xs[d], ww = __ldg(w + d);
    q[d] = q8x4<P>(make_float4(ww.x * (x.x * inv), ww.y * (x.y * inv), ww.z * (x.z * inv), ww.w * (x.w * inv)), s, qi);
  }
  if (threadIdx.x == 0) *sx = s;
}

template <class P>
__global__ void rmsnorm_q8_v4_kernel(const float* x, const float* w, int dim, float eps, typename P::Code* q, float* sx,
                                     int group, int group_stride, int group_off) {
  extern __shared__ float4 xs4[];
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const int dim4 = dim / 4;
  const float4* xr =
      reinterpret_cast<const float4*>(x + (int64_t(r / group) * group_stride + group_off + r % group) * dim);
  for (int d = threadIdx.x; d < dim4; d += blockDim.x) xs4[d] = xr[d];
  norm_q8_row_v4<P>(xs4, reinterpret_cast<const float4*>(w), dim4, eps, dim,
                    reinterpret_cast<typename P::Code4*>(q + r * dim), sx + r, sh);
}

template <class P>
__global__ void residual_rmsnorm_q8_v4_kernel(const typename P::Acc* __restrict__ acc, const float* sx_acc,
                                              const float* __restrict__ sw, float* x, const float* w, int dim,
                                              float eps, typename P::Code* q, float* sx) {
  extern __shared__ float4 xs4[];
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const int dim4 = dim / 4;
  const float s_acc = sx_acc[r];
  const typename P::Acc4* a = reinterpret_cast<const typename P::Acc4*>(acc + r * dim);
  const float4* ws = reinterpret_cast<const float4*>(sw);
  float4* xr = reinterpret_cast<float4*>(x + r * dim);
  for (int d = threadIdx.x; d < dim4; d += blockDim.x) {
    const float4 o = xr[d], y = deq4(s_acc, __ldg(ws + d), __ldcs(a + d));
    const float4 v = make_float4(__fadd_rn(o.x, y.x), __fadd_rn(o.y, y.y), __fadd_rn(o.z, y.z), __fadd_rn(o.w, y.w));
    xr[d] = v;
    xs4[d] = v;
  }
  // norm_q8_row_v4 synchronizes: every thread has read sx_acc[r] before sx[r] is written
  norm_q8_row_v4<P>(xs4, reinterpret_cast<const float4*>(w), dim4, eps, dim,
                    reinterpret_cast<typename P::Code4*>(q + r * dim), sx + r, sh);
}

template <class P>
__global__ void quant_rows_v4_kernel(const float* x, int dim, typename P::Code* q, float* sx) {
  extern __shared__ float4 xs4[];
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const int dim4 = dim / 4;
  const float4* xr = reinterpret_cast<const float4*>(x + r * dim);
  float amax = 0;
  for (int d = threadIdx.x; d < dim4; d += blockDim.x) {
    const float4 v = __ldcs(xr + d);
    xs4[d] = v;
    amax = amax4(amax, v);
  }
  const float s = P::scale(block_max(amax, sh));
  const float qi = 1.0f / s;
  typename P::Code4* o = reinterpret_cast<typename P::Code4*>(q + r * dim);
  for (int d = threadIdx.x; d < dim4; d += blockDim.x) o[d] = q8x4<P>(xs4[d], s, qi);
  if (threadIdx.x == 0) sx[r] = s;
}

// rope_split_q8_kernel, four rotation pairs per thread (half a multiple of 4, no fp32 copies).
__device__ __forceinline__ void rope1(float x0, float x1, float c, float s, __half& o0, __half& o1) {
  rope_pair(x0, x1, c, s);
  o0 = __float2half_rn(x0);
  o1 = __float2half_rn(x1);
}
template <class P>
__global__ void rope_split_q8_v4_kernel(const typename P::Acc* __restrict__ acc, const float* sx,
                                        const float* __restrict__ sw, int T, int nh, int nkv, int hd,
                                        const float* __restrict__ cos_t, const float* __restrict__ sin_t, __half* q,
                                        __half* k, __half* v) {
  using A4 = typename P::Acc4;
  const int r = blockIdx.x, half = hd / 2, pos = r % T, h4 = half / 4;
  const int Q = nh * hd, KV = nkv * hd;
  const typename P::Acc* in = acc + int64_t(r) * (Q + 2 * KV);
  const float s_in = sx[r];
  const float* cr = cos_t + int64_t(pos) * half;
  const float* sr = sin_t + int64_t(pos) * half;
  for (int t = threadIdx.x; t < (nh + nkv) * h4; t += blockDim.x) {
    const int h = t / h4, i = (t % h4) * 4, j = h * hd + i;
    const float4 x0 =
        deq4(s_in, __ldg(reinterpret_cast<const float4*>(sw + j)), __ldcs(reinterpret_cast<const A4*>(in + j)));
    const float4 x1 = deq4(s_in, __ldg(reinterpret_cast<const float4*>(sw + j + half)),
                           __ldcs(reinterpret_cast<const A4*>(in + j + half)));
    const float4 c = __ldg(reinterpret_cast<const float4*>(cr + i)), s = __ldg(reinterpret_cast<const float4*>(sr + i));
    __align__(8) __half lo[4], hi[4];
    rope1(x0.x, x1.x, c.x, s.x, lo[0], hi[0]);
    rope1(x0.y, x1.y, c.y, s.y, lo[1], hi[1]);
    rope1(x0.z, x1.z, c.z, s.z, lo[2], hi[2]);
    rope1(x0.w, x1.w, c.w, s.w, lo[3], hi[3]);
    __half* o = h < nh ? q + int64_t(r) * Q + h * hd : k + int64_t(r) * KV + (h - nh) * hd;
    *reinterpret_cast<uint2*>(o + i) = *reinterpret_cast<const uint2*>(lo);
    *reinterpret_cast<uint2*>(o + i + half) = *reinterpret_cast<const uint2*>(hi);
  }
  for (int t = threadIdx.x * 4; t < KV; t += blockDim.x * 4) {
    const float4 x = deq4(s_in, __ldg(reinterpret_cast<const float4*>(sw + Q + KV + t)),
                          __ldcs(reinterpret_cast<const A4*>(in + Q + KV + t)));
    __align__(8) __half o[4] = {__float2half_rn(x.x), __float2half_rn(x.y), __float2half_rn(x.z), __float2half_rn(x.w)};
    *reinterpret_cast<uint2*>(v + int64_t(r) * KV + t) = *reinterpret_cast<const uint2*>(o);
  }
}

}  // namespace

namespace {
bool use_vec(int width) { return width % 4 == 0; }
int norm_threads(int) { return 512; }  // the scalar kernels' block size: the same sums
template <typename K>
void smem_attr(K kernel, size_t bytes) {
  QT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}
}  // namespace

namespace {
// The launches, for either policy; the public overloads below pick P from the pointer types.
template <class P>
void residual_rmsnorm_t(const typename P::Acc* acc, const float* sx_acc, const float* sw, float* x, const float* w,
                        int rows, int dim, float eps, typename P::Code* q, float* sx, cudaStream_t s) {
  if (rows <= 0) return;
  const size_t smem = size_t(dim) * 4;
  if (use_vec(dim)) {
    smem_attr(residual_rmsnorm_q8_v4_kernel<P>, smem);
    residual_rmsnorm_q8_v4_kernel<P><<<rows, norm_threads(dim), smem, s>>>(acc, sx_acc, sw, x, w, dim, eps, q, sx);
    QT_CUDA_LAUNCHED();
    return;
  }
  smem_attr(residual_rmsnorm_q8_kernel<P>, smem);
  residual_rmsnorm_q8_kernel<P><<<rows, 512, smem, s>>>(acc, sx_acc, sw, x, w, dim, eps, q, sx);
  QT_CUDA_LAUNCHED();
}

template <class P>
void rope_split_t(const typename P::Acc* acc, const float* sx, const float* sw, int n, int T, int nh, int nkv, int hd,
                  const float* cos, const float* sin, __half* q, __half* k, __half* v, cudaStream_t s) {
  if (n <= 0) return;
  if (use_vec(hd / 2) && use_vec(nkv * hd)) {
    rope_split_q8_v4_kernel<P><<<n, 256, 0, s>>>(acc, sx, sw, T, nh, nkv, hd, cos, sin, q, k, v);
    QT_CUDA_LAUNCHED();
    return;
  }
  rope_split_q8_kernel<P><<<n, 256, 0, s>>>(acc, sx, sw, T, nh, nkv, hd, cos, sin, q, k, v);
  QT_CUDA_LAUNCHED();
}

template <class P>
void rmsnorm_rows_t(const float* x, const float* w, int rows, int dim, float eps, int group, int group_stride,
                    int group_off, typename P::Code* q, float* sx, cudaStream_t s) {
  if (rows <= 0) return;
  if (use_vec(dim) && residual_rmsnorm_q8_fits(dim)) {
    const size_t smem = size_t(dim) * 4;
    smem_attr(rmsnorm_q8_v4_kernel<P>, smem);
    rmsnorm_q8_v4_kernel<P>
        <<<rows, norm_threads(dim), smem, s>>>(x, w, dim, eps, q, sx, group, group_stride, group_off);
    QT_CUDA_LAUNCHED();
    return;
  }
  rmsnorm_q8_kernel<P><<<rows, 512, 0, s>>>(x, w, dim, eps, q, sx, group, group_stride, group_off);
  QT_CUDA_LAUNCHED();
}

template <class P>
void quant_rows_t(const float* x, int rows, int dim, typename P::Code* q, float* sx, cudaStream_t s) {
  if (rows <= 0) return;
  if (use_vec(dim) && swiglu_q8_fits(dim)) {
    const size_t smem = size_t(dim) * 4;
    smem_attr(quant_rows_v4_kernel<P>, smem);
    quant_rows_v4_kernel<P><<<rows, norm_threads(dim), smem, s>>>(x, dim, q, sx);
    QT_CUDA_LAUNCHED();
    return;
  }
  quant_rows_kernel<P><<<rows, 512, 0, s>>>(x, dim, q, sx);
  QT_CUDA_LAUNCHED();
}

template <class P>
void dequant_t(const typename P::Acc* acc, int rows, int out, const float* sx, const float* sw, float* y,
               bool accumulate, cudaStream_t s) {
  if (rows <= 0 || out <= 0) return;
  dequant_kernel<P><<<rows, 256, 0, s>>>(acc, out, sx, sw, y, accumulate);
  QT_CUDA_LAUNCHED();
}

template <class P>
void swiglu_t(const typename P::Acc* acc, int rows, int F, const float* sx_in, const float* sw, typename P::Code* q,
              float* sx_out, cudaStream_t s) {
  if (rows <= 0) return;
  const size_t smem = size_t(F) * 4;
  if (use_vec(F)) {
    smem_attr(swiglu_q8_v4_kernel<P>, smem);
    swiglu_q8_v4_kernel<P><<<rows, 512, smem, s>>>(acc, F, sx_in, sw, q, sx_out);
    QT_CUDA_LAUNCHED();
    return;
  }
  smem_attr(swiglu_q8_kernel<P>, smem);
  swiglu_q8_kernel<P><<<rows, 512, smem, s>>>(acc, F, sx_in, sw, q, sx_out);
  QT_CUDA_LAUNCHED();
}

uint8_t* bits(e4m3* q) { return reinterpret_cast<uint8_t*>(q); }
}  // namespace

bool swiglu_q8_fits(int F) {
  int dev = 0, optin = 0;
  QT_CUDA_CHECK(cudaGetDevice(&dev));
  QT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return size_t(F) * 4 + 256 <= size_t(optin);
}

bool residual_rmsnorm_q8_fits(int dim) { return swiglu_q8_fits(dim); }

// ---- W8A8 (int8 codes, int32 sums)
void residual_rmsnorm_q8(const int32_t* acc, const float* sx_acc, const float* sw, float* x, const float* w, int rows,
                         int dim, float eps, int8_t* q, float* sx, cudaStream_t s) {
  residual_rmsnorm_t<I8>(acc, sx_acc, sw, x, w, rows, dim, eps, q, sx, s);
}
void rope_split_q8(const int32_t* acc, const float* sx, const float* sw, int n, int T, int nh, int nkv, int hd,
                   const float* cos, const float* sin, __half* q, __half* k, __half* v, cudaStream_t s) {
  rope_split_t<I8>(acc, sx, sw, n, T, nh, nkv, hd, cos, sin, q, k, v, s);
}
void rmsnorm_q8(const float* x, const float* w, int rows, int dim, float eps, int8_t* q, float* sx, cudaStream_t s) {
  rmsnorm_rows_t<I8>(x, w, rows, dim, eps, rows, 0, 0, q, sx, s);
}
void rmsnorm_q8_rows(const float* x, const float* w, int rows, int dim, float eps, int group, int group_stride,
                     int group_off, int8_t* q, float* sx, cudaStream_t s) {
  rmsnorm_rows_t<I8>(x, w, rows, dim, eps, group, group_stride, group_off, q, sx, s);
}
void quant_rows(const float* x, int rows, int dim, int8_t* q, float* sx, cudaStream_t s) {
  quant_rows_t<I8>(x, rows, dim, q, sx, s);
}
void dequant(const int32_t* acc, int rows, int out, const float* sx, const float* sw, float* y, bool accumulate,
             cudaStream_t s) {
  dequant_t<I8>(acc, rows, out, sx, sw, y, accumulate, s);
}
void swiglu_q8(const int32_t* acc, int rows, int F, const float* sx_in, const float* sw, int8_t* q, float* sx_out,
               cudaStream_t s) {
  swiglu_t<I8>(acc, rows, F, sx_in, sw, q, sx_out, s);
}

// ---- FP8 (E4M3 codes, fp32 sums)
void residual_rmsnorm_q8(const float* acc, const float* sx_acc, const float* sw, float* x, const float* w, int rows,
                         int dim, float eps, e4m3* q, float* sx, cudaStream_t s) {
  residual_rmsnorm_t<F8>(acc, sx_acc, sw, x, w, rows, dim, eps, bits(q), sx, s);
}
void rope_split_q8(const float* acc, const float* sx, const float* sw, int n, int T, int nh, int nkv, int hd,
                   const float* cos, const float* sin, __half* q, __half* k, __half* v, cudaStream_t s) {
  rope_split_t<F8>(acc, sx, sw, n, T, nh, nkv, hd, cos, sin, q, k, v, s);
}
void rmsnorm_q8(const float* x, const float* w, int rows, int dim, float eps, e4m3* q, float* sx, cudaStream_t s) {
  rmsnorm_rows_t<F8>(x, w, rows, dim, eps, rows, 0, 0, bits(q), sx, s);
}
void quant_rows(const float* x, int rows, int dim, e4m3* q, float* sx, cudaStream_t s) {
  quant_rows_t<F8>(x, rows, dim, bits(q), sx, s);
}
void dequant(const float* acc, int rows, int out, const float* sx, const float* sw, float* y, bool accumulate,
             cudaStream_t s) {
  dequant_t<F8>(acc, rows, out, sx, sw, y, accumulate, s);
}
void swiglu_q8(const float* acc, int rows, int F, const float* sx_in, const float* sw, e4m3* q, float* sx_out,
               cudaStream_t s) {
  swiglu_t<F8>(acc, rows, F, sx_in, sw, bits(q), sx_out, s);
}

}  // namespace qt::cuda
