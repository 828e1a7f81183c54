// One token through the AVX2 int8 × int8 Linear (int8_avx2.h's layout: signed codes [n, k]
// row-major, fp32 scales [n, k/gl]), for a slice of the output rows on the calling thread: the
// decode step's GEMV. The same exact int32 group sums and the same fp32 epilogue as
// gemm_s8s8_avx2 (y = s_x · Σ_g s[g] · float(acc_g), multiply and add rounded separately), so the
// same bits; only the blocking differs: four rows share each load of the token (the GEMM's 2 × 3
// register block has one token to share here), and no OpenMP.
#pragma once
#include <cstdint>

namespace qt::kernels {

// y[r] for r in [r0, r1); a: the token's codes (quantize_activations_int8), sx its scale; k and gl
// multiples of 32 (int8_avx2_supports).
void gemv_s8s8_avx2(const int8_t* q, const float* s, int64_t k, int64_t gl, const int8_t* a, float sx, int64_t r0,
                    int64_t r1, float* y);

}  // namespace qt::kernels
