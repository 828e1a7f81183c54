// ggml block types: the table (ids, block sizes and bytes from ggml's type traits, ggml.c) with
// each type's conversions, as ggml's type_traits holds them; the block families live in
// ggml_quants_legacy.cpp, ggml_quants_k.cpp, ggml_quants_iq4nl.cpp and ggml_quants_mxfp4.cpp, the
// plain float types here.
#include "formats/ggml_blocks.h"

#include <algorithm>
#include <cstring>

#include "formats/ggml_quants_common.h"
#include "formats/tensor.h"

namespace qt {

namespace {

using ggml::h2f;

void deq_f32(const uint8_t* src, float* dst, size_t nb) {
  if (nb) std::memcpy(dst, src, nb * 4);
}

void deq_f16(const uint8_t* src, float* dst, size_t nb) {
  for (size_t i = 0; i < nb; ++i) dst[i] = h2f(src + 2 * i);
}

void deq_bf16(const uint8_t* src, float* dst, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    uint32_t u = uint32_t(src[2 * i] | (src[2 * i + 1] << 8)) << 16;
    std::memcpy(dst + i, &u, 4);
  }
}

void from_f32(const float* src, uint8_t* dst, size_t nb) {
  if (nb) std::memcpy(dst, src, nb * 4);
}

void from_f16(const float* src, uint8_t* dst, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const uint16_t h = f32_to_f16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void from_bf16(const float* src, uint8_t* dst, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const uint16_t h = f32_to_bf16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

// A block type's row functions from its family's (ggml_quants_common.h): one loop over the blocks
// serves every type, as ggml's from_float_ref loops over quantize_row_*_ref's blocks.
template <GgmlType T, int BS, int BYTES, auto Deq, auto Quant>
struct BlockFns {
  static void to_float(const uint8_t* src, float* dst, size_t nb) { Deq(T, src, dst, nb); }
  static void from_float(const float* src, uint8_t* dst, size_t nb) {
    for (size_t b = 0; b < nb; ++b) Quant(T, src + b * BS, nullptr, dst + b * BYTES);
  }
  static void from_float_imatrix(const float* src, const float* imp, uint8_t* dst, size_t nb) {
    for (size_t b = 0; b < nb; ++b) Quant(T, src + b * BS, imp + b * BS, dst + b * BYTES);
  }
};

template <GgmlType T, int BS, int BYTES, auto Deq, auto Quant>
constexpr GgmlTypeRow block_row(const char* name) {
  using F = BlockFns<T, BS, BYTES, Deq, Quant>;
  return {T, name, BS, BYTES, F::to_float, F::from_float, F::from_float_imatrix};
}

// ggml's type traits (ggml.c type_traits): id, name, block size, bytes per block, to_float,
// from_float (ggml's from_float_ref) and the importance-weighted from_float. Types we cannot
// dequantize still parse (a file may hold them), with to_float = nullptr.
constexpr GgmlTypeRow kRows[] = {
    {GgmlType::F32, "F32", 1, 4, deq_f32, from_f32, nullptr},
    {GgmlType::F16, "F16", 1, 2, deq_f16, from_f16, nullptr},
    block_row<GgmlType::Q4_0, 32, 18, ggml::dequantize_legacy, ggml::quantize_legacy>("Q4_0"),
    block_row<GgmlType::Q4_1, 32, 20, ggml::dequantize_legacy, ggml::quantize_legacy>("Q4_1"),
    block_row<GgmlType::Q5_0, 32, 22, ggml::dequantize_legacy, ggml::quantize_legacy>("Q5_0"),
    block_row<GgmlType::Q5_1, 32, 24, ggml::dequantize_legacy, ggml::quantize_legacy>("Q5_1"),
    block_row<GgmlType::Q8_0, 32, 34, ggml::dequantize_legacy, ggml::quantize_legacy>("Q8_0"),
    {GgmlType::Q8_1, "Q8_1", 32, 36, nullptr, nullptr, nullptr},
    block_row<GgmlType::Q2_K, 256, 84, ggml::dequantize_k, ggml::quantize_k>("Q2_K"),
    block_row<GgmlType::Q3_K, 256, 110, ggml::dequantize_k, ggml::quantize_k>("Q3_K"),
    block_row<GgmlType::Q4_K, 256, 144, ggml::dequantize_k, ggml::quantize_k>("Q4_K"),
    block_row<GgmlType::Q5_K, 256, 176, ggml::dequantize_k, ggml::quantize_k>("Q5_K"),
    block_row<GgmlType::Q6_K, 256, 210, ggml::dequantize_k, ggml::quantize_k>("Q6_K"),
    {GgmlType::Q8_K, "Q8_K", 256, 292, nullptr, nullptr, nullptr},
    {GgmlType(16), "IQ2_XXS", 256, 66, nullptr, nullptr, nullptr},
    {GgmlType(17), "IQ2_XS", 256, 74, nullptr, nullptr, nullptr},
    {GgmlType(18), "IQ3_XXS", 256, 98, nullptr, nullptr, nullptr},
    {GgmlType(19), "IQ1_S", 256, 50, nullptr, nullptr, nullptr},
    block_row<GgmlType::IQ4_NL, 32, 18, ggml::dequantize_iq4_nl, ggml::quantize_iq4_nl>("IQ4_NL"),
    {GgmlType(21), "IQ3_S", 256, 110, nullptr, nullptr, nullptr},
    {GgmlType(22), "IQ2_S", 256, 82, nullptr, nullptr, nullptr},
    block_row<GgmlType::IQ4_XS, 256, 136, ggml::dequantize_iq4_nl, ggml::quantize_iq4_nl>("IQ4_XS"),
    {GgmlType::I8, "I8", 1, 1, nullptr, nullptr, nullptr},
    {GgmlType::I16, "I16", 1, 2, nullptr, nullptr, nullptr},
    {GgmlType::I32, "I32", 1, 4, nullptr, nullptr, nullptr},
    {GgmlType::I64, "I64", 1, 8, nullptr, nullptr, nullptr},
    {GgmlType::F64, "F64", 1, 8, nullptr, nullptr, nullptr},
    {GgmlType(29), "IQ1_M", 256, 56, nullptr, nullptr, nullptr},
    {GgmlType::BF16, "BF16", 1, 2, deq_bf16, from_bf16, nullptr},
    {GgmlType(34), "TQ1_0", 256, 54, nullptr, nullptr, nullptr},
    {GgmlType(35), "TQ2_0", 256, 66, nullptr, nullptr, nullptr},
    block_row<GgmlType::MXFP4, 32, 17, ggml::dequantize_mxfp4, ggml::quantize_mxfp4>("MXFP4"),
    {GgmlType(40), "NVFP4", 64, 36, nullptr, nullptr, nullptr},
    {GgmlType(41), "Q1_0", 128, 18, nullptr, nullptr, nullptr},
};

}  // namespace

const GgmlTypeRow* ggml_type_row(uint32_t id) {
  for (const auto& r : kRows)
    if (uint32_t(r.type) == id) return &r;
  return nullptr;
}

const GgmlTypeRow* ggml_type_row_by_name(std::string_view name) {
  for (const auto& r : kRows)
    if (name == r.name) return &r;
  return nullptr;
}

void ggml_dequantize(const GgmlTypeRow& row, const uint8_t* src, float* dst, size_t nblocks) {
  // One thread is already fast (the whole 135M-parameter model in ~0.2 s); threads only pay off
  // for big tensors: every parallel region costs a barrier, and on a loaded machine a barrier
  // waits for a descheduled thread (measured: 272 small regions made loading 5-10x slower).
  const size_t n = nblocks * size_t(row.block_size);
  const size_t chunk = std::max<size_t>(1, (size_t(1) << 18) / size_t(row.block_size));
  const long long nchunks = (long long)((nblocks + chunk - 1) / chunk);
  if (n < (size_t(1) << 23) || nchunks <= 1) {
    row.to_float(src, dst, nblocks);
    return;
  }
#pragma omp parallel for schedule(static)
  for (long long c = 0; c < nchunks; ++c) {
    const size_t b0 = size_t(c) * chunk;
    const size_t nb = std::min(chunk, nblocks - b0);
    row.to_float(src + b0 * size_t(row.type_size), dst + b0 * size_t(row.block_size), nb);
  }
}

}  // namespace qt
