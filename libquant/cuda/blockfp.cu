// The Dequantized rows on the GPU (blockfp.h): the per-layer weight decode into bf16, and the
// activation rounding of the rows that quantize a Linear's input. Every formula is the CPU's
// (schemes/nvfp4.cpp, mxfp4.cpp, fp8_block.cpp, fp8.cpp), on the shared scalar helpers e2m1.h and
// e4m3.h, with the fp32 operations spelled as _rn intrinsics so that no contraction or fast
// division can change a bit; tests/test_cuda_fp4.cpp checks both against the CPU bit for bit.
#include <algorithm>
#include <cfloat>
#include <cstring>

#include "libquant/cuda/blockfp.h"
#include "libquant/cuda/check.h"
#include "libquant/cuda/reduce.cuh"
#include "libquant/schemes/e2m1.h"
#include "libquant/schemes/e4m3.h"

namespace qt::cuda {
namespace {

// 2^(e − 127) for an E8M0 byte (2^-127 is an fp32 subnormal, 255 gives Inf, as std::ldexp does).
__device__ __forceinline__ float e8m0_value(int e) {
  const uint32_t bits = e == 0 ? 0x00400000u : uint32_t(e) << 23;
  float v;
  memcpy(&v, &bits, 4);
  return v;
}

__global__ void blockfp_dequant_kernel(BlockFpKind kind, const uint8_t* codes, const void* scales, const float* global,
                                       int cols, __nv_bfloat16* out) {
  const int64_t r = blockIdx.x;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float v;
    if (kind == BlockFpKind::Fp8Block) {  // fp8_block_kernel_values: e4m3(code) · s in fp32
      const float s = static_cast<const float*>(scales)[r * (cols / 128) + j / 128];
      v = __fmul_rn(e4m3_to_f32(codes[r * cols + j]), s);
    } else {
      const int code = (codes[r * (cols / 2) + j / 2] >> ((j & 1) * 4)) & 15;
      const uint8_t* sb = static_cast<const uint8_t*>(scales);
      float s;
      if (kind == BlockFpKind::Nvfp4)  // nvfp4_dequantize: s = e4m3(byte) / global
        s = __fdiv_rn(e4m3_to_f32(sb[r * (cols / 16) + j / 16]), global[r]);
      else  // mxfp4_dequantize: s = bf16(2^(e − 127))
        s = __bfloat162float(__float2bfloat16_rn(e8m0_value(sb[r * (cols / 32) + j / 32])));
      v = __fmul_rn(e2m1_value(code), s);
    }
    out[r * cols + j] = __float2bfloat16_rn(v);
  }
}

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// nvfp4.cpp global_scale_of(amax, F32): 2688 / max(amax, FLT_MIN) as torch computes it
// (reciprocal, then the product); non-finite → 1.
__device__ __forceinline__ float nvfp4_global(float amax) {
  const float gs = __fmul_rn(__fdiv_rn(1.0f, fmaxf(amax, FLT_MIN)), 2688.0f);
  return isfinite(gs) ? gs : 1.0f;
}

// nvfp4.cpp group_scale's E4M3 part: e4m3_scale(gs · amax/6) (0 → 0.125).
__device__ __forceinline__ float nvfp4_e(float amax, float gs) {
  float v = __fmul_rn(gs, __fdiv_rn(amax, 6.0f));
  v = v < -448.0f ? -448.0f : v;
  const float e = e4m3_round(v > 448.0f ? 448.0f : v);
  return e == 0.0f ? 0.125f : e;
}

// A group's scale from its absmax (and, nvfp4, the token's global scale).
__device__ __forceinline__ float group_scale(ActRound a, float amax, float gs) {
  if (a == ActRound::Nvfp4) return __fdiv_rn(nvfp4_e(amax, gs), gs);  // nvfp4.cpp group_scale
  if (a == ActRound::Mxfp4) {                                         // mxfp4.cpp mx_exponent(amax, F32) then mx_scale
    uint32_t u;
    memcpy(&u, &amax, 4);
    const int exp2 = int(((u + (1u << 21)) & 0xff800000u) >> 23);
    int e = 0;
    if (exp2 >= 255)
      e = 255;
    else if (exp2 != 0)
      e = exp2 - 2 < 0 ? 0 : exp2 - 2;
    const float s = e8m0_value(e);
    return s == 0.0f ? 1.0f : s;
  }
  const float s = __fdiv_rn(amax, 448.0f);  // fp8.cpp quantize_token_fp8: absmax/448, 0 → eps(fp32)
  return s == 0.0f ? 1.1920928955078125e-07f : s;
}

// x's code under scale s, times `mult` (s itself, or nvfp4's E4M3 factor of it when factored).
__device__ __forceinline__ float round_value(ActRound a, float x, float s, float mult) {
  if (a == ActRound::Fp8Groups) {  // fp8_codes_f32: e4m3(clamp(x/s + 0, ±448)), then · s
    float y = __fadd_rn(__fdiv_rn(x, s), 0.0f);
    y = y < -448.0f ? -448.0f : y;
    return __fmul_rn(e4m3_round(y > 448.0f ? 448.0f : y), mult);
  }
  return __fmul_rn(e2m1_value(e2m1_code_clamped(__fdiv_rn(x, s))), mult);  // E2M1 value · s
}

// One block per token. Each warp takes chunks of 32·E columns (E = group/32 for groups over 32,
// else 1): lane l holds columns c + l + 32·i; a group's lanes (all 32, or 16 for nvfp4's groups)
// share its absmax through shuffles. global (nvfp4): write the factored form (blockfp.h).
template <typename Out>
__global__ void round_acts_kernel(ActRound a, const float* x, Out* y, int k, float* global) {
  __shared__ float sh[32];
  const float* xr = x + int64_t(blockIdx.x) * k;
  Out* yr = y + int64_t(blockIdx.x) * k;
  const int G = a == ActRound::Nvfp4 ? 16 : a == ActRound::Mxfp4 ? 32 : 128;
  float gs = 1.0f;
  if (a == ActRound::Nvfp4) {  // the token's own absmax sets its global scale
    float m = 0.0f;
    for (int j = threadIdx.x; j < k; j += blockDim.x) m = fmaxf(m, fabsf(xr[j]));
    gs = nvfp4_global(block_max(m, sh));
    if (global && threadIdx.x == 0) global[blockIdx.x] = gs;
  }
  const int E = G > 32 ? G / 32 : 1, chunk = 32 * E, width = G < 32 ? G : 32;
  const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  for (int c = (threadIdx.x >> 5) * chunk; c < k; c += nw * chunk) {
    float v[4];
    float m = 0.0f;
    for (int i = 0; i < E; ++i) {
      const int j = c + lane + 32 * i;
      v[i] = j < k ? xr[j] : 0.0f;
      m = fmaxf(m, fabsf(v[i]));
    }
    for (int o = width / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float s = group_scale(a, m, gs);
    const float mult = global && a == ActRound::Nvfp4 ? nvfp4_e(m, gs) : s;
    for (int i = 0; i < E; ++i) {
      const int j = c + lane + 32 * i;
      if (j < k) store(yr + j, round_value(a, v[i], s, mult));
    }
  }
}

template <typename Out>
void launch_round(ActRound a, const float* x, Out* y, int rows, int k, cudaStream_t s, float* global = nullptr) {
  if (a == ActRound::None || rows <= 0) return;
  round_acts_kernel<Out><<<rows, 256, 0, s>>>(a, x, y, k, a == ActRound::Nvfp4 ? global : nullptr);
  QT_CUDA_LAUNCHED();
}

// y[r] /= d[r] over each row's cols values, or (add_to) add_to[r] += y[r] / d[r].
__global__ void divide_rows_kernel(float* y, const float* d, int cols, float* add_to) {
  const int64_t r = blockIdx.x;
  const float dr = d[r];
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = __fdiv_rn(y[r * cols + c], dr);
    if (add_to)
      add_to[r * cols + c] += v;
    else
      y[r * cols + c] = v;
  }
}

// One block per token, one warp per group of 128 columns at a time (lane l: columns l + 32·i).
__global__ void quant_groups_kernel(const float* x, uint8_t* q, float* s, int k, int rows) {
  const int64_t t = blockIdx.x;
  const float* xr = x + t * k;
  uint8_t* qr = q + t * k;
  const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  for (int g = threadIdx.x >> 5; g < k / 128; g += nw) {
    float v[4], m = 0.0f;
    for (int i = 0; i < 4; ++i) m = fmaxf(m, fabsf(v[i] = xr[g * 128 + lane + 32 * i]));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float sc = group_scale(ActRound::Fp8Groups, m, 1.0f);
    for (int i = 0; i < 4; ++i) {  // round_value's code: e4m3(clamp(x/s + 0, ±448))
      float y = __fadd_rn(__fdiv_rn(v[i], sc), 0.0f);
      y = y < -448.0f ? -448.0f : y;
      qr[g * 128 + lane + 32 * i] = e4m3_from_f32(y > 448.0f ? 448.0f : y);
    }
    if (lane == 0) s[int64_t(g) * rows + t] = sc;
  }
}

__global__ void add_into_kernel(float* x, const float* y, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

}  // namespace

void quantize_fp8_groups(const float* x, uint8_t* q, float* s, int rows, int k, cudaStream_t st) {
  if (rows <= 0) return;
  quant_groups_kernel<<<rows, 256, 0, st>>>(x, q, s, k, rows);
  QT_CUDA_LAUNCHED();
}

void add_into(float* x, const float* y, size_t n, cudaStream_t s) {
  if (n == 0) return;
  add_into_kernel<<<int(std::min<size_t>((n + 255) / 256, 8192)), 256, 0, s>>>(x, y, n);
  QT_CUDA_LAUNCHED();
}

int act_round_group(ActRound a) {
  return a == ActRound::Nvfp4 ? 16 : a == ActRound::Mxfp4 ? 32 : a == ActRound::Fp8Groups ? 128 : 0;
}

void round_activations(ActRound a, const float* x, float* y, int rows, int k, cudaStream_t s) {
  launch_round(a, x, y, rows, k, s);
}
void round_activations(ActRound a, const float* x, __nv_bfloat16* y, int rows, int k, cudaStream_t s, float* global) {
  launch_round(a, x, y, rows, k, s, global);
}

void divide_rows(float* y, const float* d, int rows, int cols, float* add_to, cudaStream_t s) {
  if (rows <= 0) return;
  divide_rows_kernel<<<rows, 256, 0, s>>>(y, d, cols, add_to);
  QT_CUDA_LAUNCHED();
}

void blockfp_dequant(const BlockFpWeight& w, __nv_bfloat16* out, cudaStream_t s) {
  if (w.rows <= 0) return;
  blockfp_dequant_kernel<<<w.rows, 256, 0, s>>>(w.kind, w.codes.get<uint8_t>(), w.scales.get(),
                                                w.global.bytes() ? w.global.get<float>() : nullptr, w.cols, out);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
