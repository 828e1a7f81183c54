// MLX folder (what mlx_lm.convert writes, docs/spec/mlx-affine.md): config.json + model.safetensors
// (__metadata__ {"format": "mlx"}) + tokenizer files. A quantized module M stores
//   M.weight  U32 [rows, cols*bits/32]   packed codes (mx.quantize, mode "affine")
//   M.scales  dtype [rows, cols/group]
//   M.biases  dtype [rows, cols/group]
// and config.json carries the same block under "quantization" and "quantization_config":
//   {"group_size": G, "bits": B, "mode": "affine", "<module path>": {"group_size": g,
//    "bits": b, "mode": "affine"}, ...}
// with a per-module entry for every module whose parameters differ from the global ones (the
// dicts mlx_lm's quant_predicate returns and its load passes to to_quantized). A module stored
// unquantized has no M.scales: mlx_lm's loader quantizes only modules whose scales it finds, so
// nothing else marks it (why it was skipped travels in the safetensors metadata instead).
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/layouts/hf.h"
#include "formats/layouts/quantized.h"

namespace qt {

// Names of a quantized weight's stored tensors (data, scales, biases) in this layout.
QuantEntry mlx_tensor_names(const std::string& weight_name);

// Write `ck` (packed tensors + its normalized Checkpoint::quantization, format "mlx") into `dir`.
void write_mlx_folder(const Checkpoint& ck, const std::string& dir, HfWriteOptions opt);

// config.json of an MLX-quantized folder: a "quantization" object with "group_size" and "bits".
bool is_mlx_quantized_config(const nlohmann::json& cfg);
// The normalized description of a folder's stored tensors. `metadata`: the safetensors
// __metadata__ (for quanttool's skip reasons).
nlohmann::json mlx_describe(const std::string& dir, const nlohmann::json& cfg,
                            const std::map<std::string, Tensor>& stored,
                            const std::map<std::string, std::string>& metadata);

}  // namespace qt
