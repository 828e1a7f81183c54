// Hugging Face folder writer: Checkpoint -> config.json, model.safetensors (sharded above a
// size, with model.safetensors.index.json), tokenizer.json, tokenizer_config.json,
// generation_config.json. What transformers' from_pretrained expects (docs/spec/hf-config.md,
// docs/spec/safetensors.md §Writers, §Sharded checkpoints).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "formats/checkpoint.h"
#include "formats/tensor.h"

namespace qt {

struct HfWriteOptions {
  // Float tensors are written in this dtype (F32, F16 or BF16; rounding to nearest even).
  DType dtype = DType::F32;
  uint64_t max_shard_bytes = 5'000'000'000ull;  // huggingface_hub's default "5GB"
  bool generation_config = true;
  // safetensors __metadata__ of every shard (mlx_lm writes {"format": "mlx"}).
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  // Keys merged into config.json (a quantized layout's "quantization_config", ...).
  nlohmann::json extra_config = nlohmann::json::object();
  // Float tensors written as they are, not cast to `dtype` (a quantized weight's scales).
  std::set<std::string> keep_dtype;
  // Tensors written beside ck's (a layout's metadata tensors, e.g. bnb's quant_state blobs).
  std::map<std::string, Tensor> extra_tensors;
  // Tensors of ck not written (a layout that stores them otherwise, e.g. mlx's stacked experts).
  std::set<std::string> omit_tensors;
};

// "float32" / "float16" / "bfloat16" (config.json torch_dtype); UserError for other dtypes.
std::string torch_dtype_name(DType t);

// Write `ck` into the existing folder `dir` (the caller makes it and renames it into place).
// Tied checkpoints get no lm_head.weight; no tokenizer files when `ck` has no tokenizer.
void write_hf_folder(const Checkpoint& ck, const std::string& dir, const HfWriteOptions& opt);

}  // namespace qt
