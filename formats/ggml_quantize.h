// fp32 -> ggml block types, for the GGUF writer. The reverse of formats/ggml_blocks.h.
// The legacy types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) are ggml's reference quantizers
// (ggml-quants.c quantize_row_*_ref: what llama-quantize runs for them without an imatrix), so
// our bytes equal llama-quantize's; gguf-py's numpy quantizers (gguf/quants.py) compute the same
// and make the goldens (tests/golden/make_gguf_export_goldens.py). IQ4_NL is our own rounding
// (a scale search; ggml_quants_iq4nl.cpp says which), not llama-quantize's bytes (those:
// ggml_quantize_llama); IQ4_XS is llama.cpp's rule (quantize_iq4_xs), its bytes. The K-quants (Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K; super-blocks of 256) are ggml's quantize_row_q*_K_ref restated: our bytes
// equal llama-quantize's (goldens made by llama-quantize itself; gguf-py has no K quantizer).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/ggml_blocks.h"

namespace qt {

// Whether ggml_quantize can write `type`: its type row has from_float (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
// IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
bool ggml_can_quantize(GgmlType type);

// Bytes of `n` elements of `type` (n a multiple of the block size).
size_t ggml_nbytes(GgmlType type, size_t n);

// Quantize `n` floats (a multiple of the type's block size; rows are whole blocks, so a matrix
// is one call) into `dst` (ggml_nbytes(type, n) bytes). Parallel over blocks for large inputs.
// Precondition: ggml_can_quantize(type).
void ggml_quantize(GgmlType type, const float* src, size_t n, uint8_t* dst);

// llama-quantize's bytes without an imatrix: ggml_quantize's, except for IQ4_NL, whose plain rule
// there is our search: here llama.cpp's (ggml-quants.c quantize_iq4_nl). For IQ4_NL where it is
// llama-quantize's fallback for IQ4_XS, so that a llama.cpp mix is llama-quantize's file.
void ggml_quantize_llama(GgmlType type, const float* src, size_t n, uint8_t* dst);

// Importance-weighted (`convert --format gguf --imatrix`): a [rows, cols] matrix (cols a multiple of
// the block size: 32, or 256 for the K-quants and IQ4_XS) whose column j
// has importance imp[j] (cols entries; imp null: ggml_quantize). Each block's parameters minimise
// the importance-weighted squared error among candidates that include the reference rule's, so
// the weighted error never exceeds ggml_quantize's (each family's file says which candidates).
// F32/F16/BF16 ignore imp.
void ggml_quantize_weighted(GgmlType type, const float* src, int64_t rows, int64_t cols, const float* imp,
                            uint8_t* dst);

}  // namespace qt
