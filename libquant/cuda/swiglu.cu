// SwiGLU (or Gemma's GeGLU) on the fused gate|up GEMM output: h = act(g) · u as bf16 (the down
// projection's operand), or fp32 (rows rounded before the down GEMM).
#include <algorithm>
#include <type_traits>

#include "libquant/cuda/check.h"
#include "libquant/cuda/ops.h"

namespace qt::cuda {
namespace {
// One block per row; four columns per thread and step when F % 4 == 0 (no index division).
// Gelu: torch's gelu(approximate="tanh") in float, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))),
// as the CPU's ops::geglu_tanh.
template <bool Gelu>
__global__ void swiglu_kernel(const float* gu, int F, bf16* h) {
  const int64_t r = blockIdx.x;
  const float* g = gu + r * 2 * F;
  const float* u = g + F;
  bf16* o = h + r * F;
  auto f = [](float gv, float uv) {
    if constexpr (Gelu) {
      constexpr float k = 0.7978845608028654f;  // √(2/π)
      return 0.5f * gv * (1.0f + tanhf(k * (gv + 0.044715f * gv * gv * gv))) * uv;
    } else {
      return gv / (1.0f + expf(-gv)) * uv;
    }
  };
  if (F % 4 == 0) {
    for (int c = threadIdx.x * 4; c < F; c += blockDim.x * 4) {
      const float4 a = *reinterpret_cast<const float4*>(g + c), b = *reinterpret_cast<const float4*>(u + c);
      __nv_bfloat162 lo = __floats2bfloat162_rn(f(a.x, b.x), f(a.y, b.y));
      __nv_bfloat162 hi = __floats2bfloat162_rn(f(a.z, b.z), f(a.w, b.w));
      *reinterpret_cast<__nv_bfloat162*>(o + c) = lo;
      *reinterpret_cast<__nv_bfloat162*>(o + c + 2) = hi;
    }
    return;
  }
  for (int c = threadIdx.x; c < F; c += blockDim.x) o[c] = __float2bfloat16_rn(f(g[c], u[c]));
}
// gpt_oss's clamped SwiGLU (GptOssExperts._apply_gate, the CPU's clamped_swiglu):
// g = min(g, limit), u = clamp(u, −limit, limit), (u + 1) · g · sigmoid(alpha · g); or plain SiLU.
// Out: bf16 (the bf16 down GEMM's operand) or fp32 (per-token 8-bit quantization follows).
template <typename Out>
__global__ void expert_act_kernel(const float* gu, int F, Out* h, bool clamped, float alpha, float limit) {
  const int64_t r = blockIdx.x;
  const float* g = gu + r * 2 * F;
  const float* u = g + F;
  Out* o = h + r * F;
  for (int c = threadIdx.x; c < F; c += blockDim.x) {
    float v;
    if (clamped) {
      const float x = fminf(g[c], limit), y = fminf(fmaxf(u[c], -limit), limit);
      v = (y + 1.0f) * (x * (1.0f / (1.0f + expf(-(x * alpha)))));
    } else {
      v = g[c] / (1.0f + expf(-g[c])) * u[c];
    }
    if constexpr (std::is_same_v<Out, float>)
      o[c] = v;
    else
      o[c] = __float2bfloat16_rn(v);
  }
}

template <bool Gelu>
__global__ void swiglu_f32_kernel(const float* gu, int F, float* h) {
  const int64_t r = blockIdx.x;
  const float* g = gu + r * 2 * F;
  const float* u = g + F;
  for (int c = threadIdx.x; c < F; c += blockDim.x) {
    const float gv = g[c];
    if constexpr (Gelu) {
      constexpr float k = 0.7978845608028654f;  // as swiglu_kernel
      h[r * F + c] = 0.5f * gv * (1.0f + tanhf(k * (gv + 0.044715f * gv * gv * gv))) * u[c];
    } else {
      h[r * F + c] = gv / (1.0f + expf(-gv)) * u[c];
    }
  }
}
}  // namespace

void expert_act(const float* gu, int n, int F, bf16* hb, float* hf, bool clamped, float alpha, float limit,
                cudaStream_t s) {
  if (n <= 0 || F <= 0) return;
  if (hf)
    expert_act_kernel<float><<<n, 256, 0, s>>>(gu, F, hf, clamped, alpha, limit);
  else
    expert_act_kernel<bf16><<<n, 256, 0, s>>>(gu, F, hb, clamped, alpha, limit);
  QT_CUDA_LAUNCHED();
}

void swiglu(const float* gu, int n, int F, bf16* h, cudaStream_t s, bool gelu_tanh) {
  if (n <= 0 || F <= 0) return;
  if (gelu_tanh)
    swiglu_kernel<true><<<n, 256, 0, s>>>(gu, F, h);
  else
    swiglu_kernel<false><<<n, 256, 0, s>>>(gu, F, h);
  QT_CUDA_LAUNCHED();
}

void swiglu(const float* gu, int n, int F, float* h, cudaStream_t s, bool gelu_tanh) {
  if (n <= 0 || F <= 0) return;
  if (gelu_tanh)
    swiglu_f32_kernel<true><<<n, 256, 0, s>>>(gu, F, h);
  else
    swiglu_f32_kernel<false><<<n, 256, 0, s>>>(gu, F, h);
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda
