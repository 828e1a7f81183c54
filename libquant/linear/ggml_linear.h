// A Linear over a GGUF weight in its ggml blocks (LoadMode::Native, formats/checkpoint.h): the
// blocks stay as the file stores them (mapped, never copied; but see int8_tokens), and each forward decodes rows with
// the type's dequantizer (formats/ggml_blocks.h; a SIMD decoder where one is written, bit for bit
// the same values) — a batch through the dense family's tiles one panel at a time (the bits of a
// dense Linear over the dequantized matrix, as an Eager load computes), a few tokens by row dot
// products. Memory and bytes read per token are the file's, not fp32's.
#pragma once
#include <memory>

#include "formats/checkpoint.h"
#include "libquant/linear/linear.h"

namespace qt {

// UserError when the type has no dequantizer or the shape is not whole blocks per row.
// int8_tokens: where a kernel for the type exists (every quantized type; kernels/
// ggml_interleaved.h), the rows are copied into interleaved groups of 16 at construction (the file's
// pages let go of) and a few tokens' GEMV rounds each token to int8 per block of 32 and multiplies
// the codes as integers (llama.cpp's scheme, with fp32 token scales per 32); the batches stay exact (rows decoded from the groups).
std::unique_ptr<Linear> make_ggml_linear(GgmlWeight w, const float* bias, Compute compute, bool int8_tokens = false);

}  // namespace qt
