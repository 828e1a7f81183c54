// Vision-language folders (Qwen2.5-VL, Qwen3-VL, Gemma 3 multimodal): the language model is read as its
// text architecture (a row of formats/arch.h) under the decoder's tensor names, so every scheme,
// the engine and eval-ppl see a text model; everything else the folder holds (the vision tower,
// the multimodal projector) is carried through untouched and written back byte for byte under its
// own name, with the language model's tensors renamed back to the folder's names, the VLM's
// config.json (plus the layout's quantization_config) and the processor and tokenizer files.
//
// Names: transformers 5.24's save_pretrained writes the released checkpoints' names:
//   Qwen2.5-VL: "model.layers.N.*", "model.embed_tokens.weight", "model.norm.weight",
//               "lm_head.weight", vision "visual.*";
//   Gemma 3:    "language_model.model.layers.N.*", ..., (tied head), "vision_tower.*",
//               "multi_modal_projector.*".
//   Qwen3-VL:   "model.language_model.layers.N.*", ..., "lm_head.weight", "model.visual.*".
// Folders saved by transformers 4.5x's in-memory names use "model.language_model.*" with
// "model.visual.*" / "model.vision_tower.*"; the language model's prefix is recognised either way.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/tensor.h"

namespace qt {

struct Multimodal {
  std::string source_dir;
  nlohmann::json config;  // the folder's config.json as read
  // Where the language model's "model.*" tensors sit ("model.", "model.language_model.",
  // "language_model.model.") and its head's module ("lm_head", "language_model.lm_head").
  std::string lm_prefix = "model.";
  std::string head_module = "lm_head";
  std::map<std::string, Tensor> passthrough;  // vision tower, projector: stored names and bytes

  // A decoder-side name ("model.layers.0.mlp.up_proj.weight_scale", "lm_head.weight") as the
  // folder names it; names of neither form are returned as they are.
  std::string to_folder_name(const std::string& decoder_name) const;
  // compressed-tensors' "ignore" list for the folder: the language model's modules left
  // unquantized (`decoder_modules`, decoder names) and every passthrough module, as regular
  // expressions over the runtime module names, which differ from the stored names and between
  // loaders (transformers 5: "model.language_model.layers.N...", "model.visual..."; vLLM:
  // "language_model.model.layers.N...", "visual...").
  nlohmann::json ct_ignore(const nlohmann::json& decoder_modules) const;
};

// A config.json of a supported vision-language model (Qwen2_5_VLForConditionalGeneration,
// Qwen3VLForConditionalGeneration, Gemma3ForConditionalGeneration).
bool is_multimodal_config(const nlohmann::json& cfg);
// A config.json of a vision-language model that is not supported (architectures ending in
// "ForConditionalGeneration" with a vision_config): the line to refuse it with, "" otherwise.
std::string unsupported_multimodal(const nlohmann::json& cfg);

// The text model's config as a text-architecture config.json that ModelConfig::from_hf_json
// reads: text_config (or the top level, where older Qwen2.5-VL files keep the text fields), its
// model_type the text row's, the config class's defaults filled in where the file leaves them out,
// M-RoPE reduced to 1-D RoPE (vlm.cpp says why that is exact for text).
nlohmann::json multimodal_text_config(const nlohmann::json& cfg, const std::string& path);

// Splits a folder's tensors: `tensors` keeps the language model under decoder names, the rest
// goes to the returned Multimodal's passthrough.
Multimodal split_multimodal(const std::string& dir, const nlohmann::json& cfg, std::map<std::string, Tensor>& tensors);

// The output config.json: the VLM's, its dtype keys set to `dtype`, `extra` merged in.
nlohmann::json multimodal_config_json(const Multimodal& mm, const std::string& dtype, const nlohmann::json& extra);
// mlx_vlm's module path of a vision-tower or projector module stored as `stored` ("visual.blocks.0.attn.qkv",
// "model.visual.merger.linear_fc1"): its sanitize (models/qwen2_5_vl/qwen2_5_vl.py,
// qwen3_vl/qwen3_vl.py) names every family's vision tower "vision_tower" at the top level; Gemma 3's
// "vision_tower.*" and "multi_modal_projector.*" keep their names. Per-module quantization entries
// of mlx_vlm's config.json are keyed by these paths.
std::string mlx_vlm_module_name(const std::string& stored);
// Copies the source folder's other files (processor, tokenizer, chat template, generation
// config) byte for byte into `dir`: everything but config.json and the weights.
void copy_multimodal_side_files(const Multimodal& mm, const std::string& dir);

}  // namespace qt
