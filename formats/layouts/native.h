// quanttool's native quantized folder, for the schemes no outside format carries as we compute
// them: Cider's int8 W8A8 and int4 W4A8 (and any other row of the scheme table).
//
// Files: config.json, model.safetensors (sharded past --max-shard-size, with
// model.safetensors.index.json), tokenizer.json, tokenizer_config.json, generation_config.json,
// as a Hugging Face folder. safetensors __metadata__ is {"format": "quanttool"}.
//
// A quantized weight M.weight ([rows, cols] as an HF Linear: out, in) is stored as
//   M.weight        the packed codes, exactly packed_layout()'s `data` (int8: I8 [rows, cols];
//                   int4: U8 [rows, cols/2], byte = (q[2i]+8) << 4 | (q[2i+1]+8))
//   M.weight_scale  packed_layout()'s `scales` (F32 [rows, n_groups]; n_groups = 1 per channel)
//   M.weight_bias   affine only (dtype [rows, cols/group])
// Every other tensor (norms, biases, weights left unquantized) is a float tensor in --dtype.
//
// config.json carries, next to the model's keys:
//   "quantization_config": {
//     "quant_method": "quanttool", "format": "native", "version": 1,
//     "activations": "int8-per-token-dynamic" | "none",   // informative: the scheme decides
//     "tensors": {"<weight name>": {"scheme", "bits", "group_size", "dtype", "shape",
//                                   "data", "scales"[, "biases"]}},   // quantized.h's entries
//     "skipped": {"<weight name>": "<reason>"}}
// i.e. the normalized description itself, so the reader takes it as it is (and checks it).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/layouts/hf.h"
#include "formats/layouts/quantized.h"

namespace qt {

QuantEntry native_tensor_names(const std::string& weight_name);
void write_native_folder(const Checkpoint& ck, const std::string& dir, HfWriteOptions opt);
bool is_native_quantized_config(const nlohmann::json& cfg);
nlohmann::json native_describe(const std::string& dir, const nlohmann::json& cfg);

}  // namespace qt
