// One row per ggml tensor type, as ggml's type_traits (ggml.c): block size, bytes per block, and
// the conversions to and from fp32. Dequantization must be bit-exact with gguf-py's numpy
// implementation (gguf/quants.py; see tests/golden/); quantization says its rule per family
// (ggml_quants_legacy.cpp, ggml_quants_k.cpp, ggml_quants_iq4nl.cpp, ggml_quants_mxfp4.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace qt {

// x rounded up to a multiple of `align`: GGUF pads the header and every tensor's data to the
// file's alignment (general.alignment, 32 by default; ggml/src/gguf.cpp).
inline uint64_t gguf_pad(uint64_t x, uint64_t align) { return (x + align - 1) / align * align; }

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
};

struct GgmlTypeRow {
  GgmlType type;
  const char* name;
  int block_size;  // elements per block
  int type_size;   // bytes per block
  // Dequantize `nblocks` consecutive blocks into `dst` (nblocks * block_size floats);
  // nullptr when this type cannot be dequantized (e.g. integer types).
  void (*to_float)(const uint8_t* src, float* dst, size_t nblocks);
  // Quantize `nblocks` blocks of src (nblocks * block_size floats) into `dst`; nullptr when we
  // cannot write this type (ggml_can_quantize).
  void (*from_float)(const float* src, uint8_t* dst, size_t nblocks);
  // The same with one importance per value (imp: nblocks * block_size, aligned with src; the
  // --imatrix path): never a larger importance-weighted error than from_float. nullptr: the type
  // has no weighted rule (plain float types), from_float serves.
  void (*from_float_imatrix)(const float* src, const float* imp, uint8_t* dst, size_t nblocks);
};

// nullptr when the id is not a known type.
const GgmlTypeRow* ggml_type_row(uint32_t id);
const GgmlTypeRow* ggml_type_row_by_name(std::string_view name);

// row.to_float over `nblocks` blocks, split across OpenMP threads for large tensors.
// Precondition: row.to_float != nullptr, src holds nblocks * type_size bytes.
void ggml_dequantize(const GgmlTypeRow& row, const uint8_t* src, float* dst, size_t nblocks);

}  // namespace qt
