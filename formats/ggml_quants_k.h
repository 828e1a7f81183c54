// ggml's K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of 256): both directions, for the
// type rows of ggml_blocks.h.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qt::ggml {

// Per type, over `nb` consecutive blocks: dequantize_T (bytes -> fp32, bit-exact with gguf-py),
// quantize_T (fp32 -> bytes, the reference rule) and quantize_T_imatrix (`imp`: one importance
// per value of src; never a larger importance-weighted error than quantize_T).
void dequantize_q2_k(const uint8_t* src, float* dst, size_t nb);
void quantize_q2_k(const float* src, uint8_t* dst, size_t nb);
void quantize_q2_k_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb);
void dequantize_q3_k(const uint8_t* src, float* dst, size_t nb);
void quantize_q3_k(const float* src, uint8_t* dst, size_t nb);
void quantize_q3_k_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb);
void dequantize_q4_k(const uint8_t* src, float* dst, size_t nb);
void quantize_q4_k(const float* src, uint8_t* dst, size_t nb);
void quantize_q4_k_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb);
void dequantize_q5_k(const uint8_t* src, float* dst, size_t nb);
void quantize_q5_k(const float* src, uint8_t* dst, size_t nb);
void quantize_q5_k_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb);
void dequantize_q6_k(const uint8_t* src, float* dst, size_t nb);
void quantize_q6_k(const float* src, uint8_t* dst, size_t nb);
void quantize_q6_k_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb);

}  // namespace qt::ggml
