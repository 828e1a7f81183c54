// ggml's legacy block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (blocks of 32): both directions, for
// the type rows of ggml_blocks.h.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qt::ggml {

// Per type, over `nb` consecutive blocks: dequantize_T (bytes -> fp32, bit-exact with gguf-py),
// quantize_T (fp32 -> bytes, ggml's reference rule) and quantize_T_imatrix (`imp`: one importance
// per value of src; never a larger importance-weighted error than quantize_T).
void dequantize_q4_0(const uint8_t* src, float* dst, size_t nb);
void quantize_q4_0(const float* src, uint8_t* dst, size_t nb);
void quantize_q4_0_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb);
void dequantize_q4_1(const uint8_t* src, float* dst, size_t nb);
void quantize_q4_1(const float* src, uint8_t* dst, size_t nb);
void quantize_q4_1_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb);
void dequantize_q5_0(const uint8_t* src, float* dst, size_t nb);
void quantize_q5_0(const float* src, uint8_t* dst, size_t nb);
void quantize_q5_0_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb);
void dequantize_q5_1(const uint8_t* src, float* dst, size_t nb);
void quantize_q5_1(const float* src, uint8_t* dst, size_t nb);
void quantize_q5_1_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb);
void dequantize_q8_0(const uint8_t* src, float* dst, size_t nb);
void quantize_q8_0(const float* src, uint8_t* dst, size_t nb);
void quantize_q8_0_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb);

}  // namespace qt::ggml
