// bitsandbytes 4-bit folder, as transformers saves a model loaded with BitsAndBytesConfig
// (docs/spec/bitsandbytes.md §Serialized keys, §config.json): a quantized Linear weight W stores
//   W                                      U8  [ceil(out·in/2), 1]  codes, first element high nibble
//   W.absmax                               F32 [ceil(out·in/blocksize)]
//   W.quant_map                            F32 [16]  the NF4 / FP4 code table
//   W.quant_state.bitsandbytes__nf4|__fp4  U8  [len]  JSON {"quant_type", "blocksize", "dtype",
//                                                     "shape"} as Python's json.dumps writes it
// and config.json "quantization_config" is BitsAndBytesConfig.to_dict() (load_in_4bit, quant
// type, compute dtype = the weights' dtype, no double quantization). Like transformers, only the
// Linear layers inside the blocks are quantized: the embedding and lm_head stay float. Double
// quantization (nested absmax) is refused on read.
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/layouts/hf.h"
#include "formats/layouts/quantized.h"

namespace qt {

QuantEntry bnb_tensor_names(const std::string& weight_name);
// ck.tensors hold each quantized weight's codes, absmax and quant_map (the writer adds the
// quant_state blobs and the config).
void write_bnb_folder(const Checkpoint& ck, const std::string& dir, HfWriteOptions opt);
bool is_bnb_quantized_config(const nlohmann::json& cfg);
nlohmann::json bnb_describe(const std::string& dir, const nlohmann::json& cfg,
                            const std::map<std::string, Tensor>& stored);

}  // namespace qt
