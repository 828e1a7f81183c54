// ggml's IQ4_NL (blocks of 32 on a non-uniform 4-bit grid): both directions, for the type rows
// of ggml_blocks.h.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qt::ggml {

// Per type, over `nb` consecutive blocks: dequantize_T (bytes -> fp32, bit-exact with gguf-py),
// quantize_T (fp32 -> bytes, the reference rule) and quantize_T_imatrix (`imp`: one importance
// per value of src; never a larger importance-weighted error than quantize_T).
void dequantize_iq4_nl(const uint8_t* src, float* dst, size_t nb);
void quantize_iq4_nl(const float* src, uint8_t* dst, size_t nb);
void quantize_iq4_nl_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb);

}  // namespace qt::ggml
