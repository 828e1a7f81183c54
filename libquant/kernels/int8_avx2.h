// AVX2 int8 × int8 GEMM for the integer packed Linear (libquant/linear/int_linear.cpp) on machines without
// AVX-512 VNNI: weights as stored (signed codes [n, k] row-major, fp32 scales [n, ng]), activations
// the signed per-token codes of quantize_activations_int8. Exact int32 sums per group, then
// reference_gemm's epilogue in the same fp32 order — y = s_x · (Σ_g s_w[g] · float(acc_g)), multiply
// and add rounded separately — so the result equals the scalar spec bit for bit.
#pragma once
#include <cstdint>

namespace qt::kernels {

// True when this kernel takes a group length (a multiple of its 32-byte step).
inline bool int8_avx2_supports(int64_t group_len) { return group_len > 0 && group_len % 32 == 0; }

// quantize_activations_int8 (schemes/scheme.h) with AVX2: the same codes and scales bit for bit.
void quantize_activations_int8_avx2(const float* x, int64_t m, int64_t k, int8_t* q, float* scales);

// y[m, n] = sx[t] · Σ_g s[n, g] · float(Σ_{k∈g} a[t, k] · q[n, k]); a in [−127, 127], q in
// [−128, 127]; k and gl multiples of 32. OpenMP over pairs of output rows.
void gemm_s8s8_avx2(const int8_t* q, const float* s, int64_t n, int64_t k, int64_t gl, const int8_t* a, const float* sx,
                    int64_t m, float* y);

}  // namespace qt::kernels
