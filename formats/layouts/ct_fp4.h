// compressed-tensors' FP4 formats (llm-compressor's NVFP4A16 / NVFP4 presets, nvfp4-pack-quantized;
// MXFP4A16 / MXFP4, mxfp4-pack-quantized), as the package's compressors store a Linear M:
//   M.weight_packed        U8 [out, in/2], two E2M1 codes a byte, the even column's in the low nibble
//   M.weight_scale         F8_E4M3 [out, in/16] (nvfp4) or U8 [out, in/32] E8M0 exponents (mxfp4)
//   M.weight_global_scale  F32 [1] (nvfp4 only)
// config.json's quantization_config is the package's QuantizationConfig(...).model_dump() for the
// preset (tests/golden/quant_export/ct_{nvfp4a16,nvfp4,mxfp4a16,mxfp4}_config.json).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "formats/layouts/quantized.h"

namespace qt {

// The format name of an FP4 scheme row (nvfp4, nvfp4_a4, mxfp4, mxfp4_a4); nullptr for any other row.
const char* ct_fp4_format(const std::string& row);
// The config group's "weights" and "input_activations" (null for the weight-only rows) of a row.
nlohmann::json ct_fp4_weights(const std::string& row);
nlohmann::json ct_fp4_activations(const std::string& row);
// q's stored names for an FP4 row (weight_packed, weight_scale, weight_global_scale).
void ct_fp4_names(QuantEntry& q, const std::string& weight_name);
// The row a config group of `format` holds: its weights and activations must be exactly a preset's.
// Empty when they are not (the caller says what is supported).
std::string ct_fp4_row(const std::string& format, const nlohmann::json& group);

}  // namespace qt
