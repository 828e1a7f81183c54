// ggml block dequantizers on AVX-512: the same values as the type rows' to_float
// (formats/ggml_quants_legacy.cpp, ggml_quants_k.cpp — gguf-py's arithmetic, fp32, multiply and add
// never fused) bit for bit, 16 lanes at a time, for the GGUF Linear's row decode
// (libquant/linear/ggml_linear.cpp): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace qt::kernels {

// The block-walking loops ask, per block of `bytes`, for the bytes 4 KiB further on (the rest of the
// row, then the next row's): measured, the hardware prefetcher alone feeds them at half a core's
// read rate; 4 KiB was the best of 1–4 KiB (8B-shaped Q4_0, 1 and 2 threads: 6.1 -> 6.2 and
// 11.0 -> 11.9 tok/s; SmolLM2 Q4_1 51 -> 110–125).
inline void ggml_prefetch_ahead(const uint8_t* p, int bytes) {
  for (int o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + 4096 + o), _MM_HINT_T0);
}

using GgmlDecodeFn = void (*)(const uint8_t* src, float* dst, size_t nblocks);

// The decoder of ggml type id `type`; nullptr where none is written here or the CPU has no
// AVX-512 (F/BW/VL) with F16C and FMA.
GgmlDecodeFn ggml_decoder_avx512(uint32_t type);

// Σ w[i]·x[i] over `nblocks` blocks of one row: the decoder's values, never stored, multiplied into
// two accumulators (alternate 16-value halves) with FMAs — the one-token GEMV. nullptr as above.
// Where ggml_dot_token_order(type) is not null, x must be the token put in that order first.
using GgmlDotFn = float (*)(const uint8_t* src, const float* x, size_t nblocks);
GgmlDotFn ggml_dot_avx512(uint32_t type);

// Some dots read the token permuted within each block (fewer shuffles a block): this puts x
// (nblocks blocks) in that order, and the dot is given the result. nullptr: x as it is.
using GgmlTokenOrderFn = void (*)(const float* x, size_t nblocks, float* out);
GgmlTokenOrderFn ggml_dot_token_order(uint32_t type);

}  // namespace qt::kernels
