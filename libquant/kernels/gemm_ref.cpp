// Scalar reference GEMMs: the spec. Plain loops, fp32 accumulation in k order; the bias is
// added after the sum, as the SIMD kernels do.
#include "libquant/kernels/bf16.h"
#include "libquant/kernels/gemm.h"

#include <vector>

namespace qt::kernels {

void gemm_ref_f32(const float* x, const float* w, const float* bias, int64_t M, int64_t N, int64_t K, float* y) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const float* xr = x + m * K;
      const float* wr = w + n * K;
      float s = 0.f;
      for (int64_t k = 0; k < K; ++k) s += xr[k] * wr[k];
      y[m * N + n] = bias ? s + bias[n] : s;
    }
}

void gemm_ref_bf16(const float* x, const uint16_t* w_bf16, const float* bias, int64_t M, int64_t N, int64_t K,
                   float* y) {
  std::vector<float> xr(static_cast<size_t>(K));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) xr[k] = bf16_round_value(x[m * K + k]);
    for (int64_t n = 0; n < N; ++n) {
      const uint16_t* wb = w_bf16 + n * K;
      float s = 0.f;
      // bf16 × bf16 products are exact in fp32, so only the summation order differs from
      // VDPBF16PS (which adds pair by pair).
      for (int64_t k = 0; k < K; ++k) s += xr[k] * bf16_to_float(wb[k]);
      y[m * N + n] = bias ? s + bias[n] : s;
    }
  }
}

}  // namespace qt::kernels
