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

// Calibrated rounding in a block type's own grid (GPTQ, calib/gptq_ggml.h): a block's scale fields
// are chosen first (ggml_quantize_block), then each element's code separately, then the codes are
// packed under those scales (ggml_pack_codes). Codes are unsigned, as stored: lo..hi (Q8_0: 1..255
// for the int8 values -127..127, as ggml's reference writes them; Q3_K: 0..7, value q + 4; MXFP4:
// 0..14, the E2M1 values −6..6 in rising order, not the stored code; the others the stored field).
// Every `sub` consecutive elements of a block share one scale (and minimum), so one code means one
// value for all of them.
struct GgmlCodeRange {
  int lo = 0, hi = 0;
  int sub = 0;
};
// Precondition: a quantized block type (ggml_can_quantize, block size > 1).
GgmlCodeRange ggml_code_range(GgmlType type);
// One block of x: the reference rule (imp null) or the importance-weighted search (ggml_quantize_weighted's).
void ggml_quantize_block(GgmlType type, const float* x, const float* imp, uint8_t* y);
// The block's codes L (one per element) written into y; its scale fields are kept.
void ggml_pack_codes(GgmlType type, const uint8_t* L, uint8_t* y);

}  // namespace qt
