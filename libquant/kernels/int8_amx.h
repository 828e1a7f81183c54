// AMX int8 GEMM for the integer packed Linear (libquant/linear/int_linear.cpp) at kernel level AMX:
// the VNNI kernel's weights (Int8Vnni: panels of 16 output rows × 4-byte k-quads, which is already
// a TDPBUSD B tile's layout) and activations (the per-token codes + 128 as bytes), the same exact
// int32 sums per group less 128·Σw, and the same fp32 epilogue in the same order: the result is
// bit-equal to gemm_int8_vnni_f32 and to reference_gemm.
#pragma once
#include <cstdint>

#include "libquant/kernels/int8_vnni.h"

namespace qt::kernels {

// True when the AMX kernel takes this group length: whole 64-byte A tile rows per group.
inline bool int8_amx_supports(int64_t group_len) { return group_len > 0 && group_len % 64 == 0; }

// y[m, n] = x[m, k] quantized per token (quantize_token_u8_vnni) times W; OpenMP over work items of
// row pairs × panel pairs (gemm_amx_int8.cpp). Needs kernel level AMX and int8_amx_supports(w.gl).
void gemm_int8_amx_f32(const Int8Vnni& w, const float* x, int64_t m, float* y);
// gemm_int8_amx_f32 for count matrices of one k that read the same x (q/k/v, gate/up): x quantized
// once, one OpenMP loop over all their work items; ys[i] gets gemm_int8_amx_f32's bits.
void gemm_int8_amx_f32_shared(const Int8Vnni* const* ws, int count, const float* x, int64_t m, float* const* ys);

}  // namespace qt::kernels
