// ggml block dequantizers on AVX-512: the same values as the type rows' to_float
// (formats/ggml_quants_legacy.cpp, ggml_quants_k.cpp — gguf-py's arithmetic, fp32, multiply and add
// never fused) bit for bit, 16 lanes at a time, for the GGUF Linear's row decode
// (libquant/linear/ggml_linear.cpp): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qt::kernels {

using GgmlDecodeFn = void (*)(const uint8_t* src, float* dst, size_t nblocks);

// The decoder of ggml type id `type`; nullptr where none is written here or the CPU has no
// AVX-512 (F/BW/VL) with F16C and FMA.
GgmlDecodeFn ggml_decoder_avx512(uint32_t type);

// Σ w[i]·x[i] over `nblocks` blocks of one row: the decoder's values, never stored, multiplied into
// two accumulators (alternate 16-value halves) with FMAs — the one-token GEMV. nullptr as above.
using GgmlDotFn = float (*)(const uint8_t* src, const float* x, size_t nblocks);
GgmlDotFn ggml_dot_avx512(uint32_t type);

}  // namespace qt::kernels
