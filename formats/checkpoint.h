// Checkpoint: the one in-memory representation every reader produces and every writer consumes.
// Tensors carry Hugging Face names and HF layout (Q/K rows un-permuted for GGUF input).
#pragma once
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/model_config.h"
#include "formats/tensor.h"
#include "formats/tokenizer/tokenizer.h"

namespace qt {

struct Checkpoint {
  std::string path;
  std::string source_kind;  // "gguf", "hf", later "mlx", "compressed-tensors", "bnb", ...
  ModelConfig config;
  std::map<std::string, Tensor> tensors;  // HF names
  std::unique_ptr<Tokenizer> tokenizer;
  nlohmann::json quantization;  // quantization metadata of the source, if any (null otherwise)

  const Tensor& get(const std::string& name) const;  // UserError if missing
  bool has(const std::string& name) const { return tensors.count(name) != 0; }
};

// Detect the kind of `path` (a .gguf file or a folder with config.json) and load it.
// GGUF tensors are dequantized to F32 and un-permuted at load.
Checkpoint load_checkpoint(const std::string& path);

// GGUF tensor name -> HF tensor name ("" when the tensor has no HF counterpart, e.g. rope_freqs).
std::string gguf_to_hf_name(const std::string& gguf_name);

}  // namespace qt
