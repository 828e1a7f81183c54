// compressed-tensors "int-quantized" folder (llm-compressor's W8A8 preset, what vLLM loads;
// docs/spec/compressed-tensors.md): a quantized Linear M stores
//   M.weight        I8 [out, in]
//   M.weight_scale  dtype [out, 1] (strategy "channel") or [out, in/group] (strategy "group")
// (symmetric: no weight_zero_point) and config.json "quantization_config" is the package's
// QuantizationConfig(...).model_dump(): one config group targeting "Linear", int8 symmetric
// weights (static), int8 per-token dynamic input activations, format "int-quantized",
// quantization_status "compressed", and "ignore" listing the Linear modules left unquantized
// (lm_head always: the preset never quantizes it). The embedding is never quantized here.
// "float-quantized" (the FP8_DYNAMIC preset) is the same with M.weight F8_E4M3 [out, in], weight
// and activation type "float" (activations E4M3 per token, dynamic); strategy "channel" only.
// "pack-quantized" (W4A16): see ct_pack_quantized.
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/layouts/hf.h"
#include "formats/layouts/quantized.h"

namespace qt {

QuantEntry ct_tensor_names(const std::string& weight_name);
// Whether scheme row `row` is stored pack-quantized (int4_ct): its codes as M.weight_packed
// (int32 words), beside an I64 M.weight_shape holding the weight's [rows, cols].
bool ct_pack_quantized(const std::string& row);
void write_ct_folder(const Checkpoint& ck, const std::string& dir, HfWriteOptions opt);
bool is_ct_quantized_config(const nlohmann::json& cfg);
nlohmann::json ct_describe(const std::string& dir, const nlohmann::json& cfg,
                           const std::map<std::string, Tensor>& stored);

}  // namespace qt
