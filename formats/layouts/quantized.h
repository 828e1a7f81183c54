// What every quantized layout shares: the normalized description of which tensors are stored
// quantized (Checkpoint::quantization), the same for every layout so that readers, `inspect` and
// libquant/schemes/packed_io.h need not know the layouts:
//
//   {"format": "mlx" | "native" (later "compressed-tensors", "bnb"),
//    "tensors": {"<HF weight name>": {"scheme": "affine", "bits": 4, "group_size": 64,
//                                     "dtype": "BF16",            // of the source weights
//                                     "shape": [rows, cols],       // the logical weight
//                                     "data": "<stored tensor>", "scales": "<stored tensor>",
//                                     "biases": "<stored tensor>"}},   // affine only
//    "skipped": {"<HF weight name>": "<why it is stored unquantized>"}}
//
// formats/ does not depend on libquant: the packed tensors' shapes are checked against the
// scheme table in libquant/schemes/packed_io.cpp, not here.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"

namespace qt {

// A quantized weight's entry, parsed. UserError "WHERE: ..." when a key is missing or mistyped.
struct QuantEntry {
  std::string scheme;
  int bits = 0, group_size = 0;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  std::string data, scales, biases;  // stored tensor names; biases empty unless affine
};
QuantEntry parse_quant_entry(const nlohmann::json& e, const std::string& where);
nlohmann::json quant_entry_json(const QuantEntry& q);

// The HF module path of a weight ("model.layers.0.mlp.up_proj.weight" -> "...up_proj");
// the name itself when it does not end in ".weight".
std::string module_of(const std::string& weight_name);

// After a quantized reader built `desc`: every tensor it names exists in `stored`, and the
// stored tensors minus the companions (scales, biases) form the model's tensor set, quantized
// weights standing in with their logical shape. UserError naming `dir` otherwise.
void check_quantized_tensor_set(const std::string& dir, const ModelConfig& c,
                                const std::map<std::string, Tensor>& stored, const nlohmann::json& desc);

}  // namespace qt
