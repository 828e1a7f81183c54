// Checkpoint: the one in-memory representation every reader produces and every writer consumes.
// Tensors carry Hugging Face names and HF layout (Q/K rows un-permuted for GGUF input).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/model_config.h"
#include "formats/tensor.h"
#include "formats/tokenizer/tokenizer.h"
#include "formats/vlm.h"

namespace qt {

// A GGUF weight kept in its ggml blocks (LoadMode::Native): an HF [rows, cols] matrix of ggml type
// `type` (formats/ggml_blocks.h) whose row r is GGUF row row_of[r] (llama.cpp's Q/K permutation
// undone by row; empty: the identity), row_bytes bytes a row from `data`, kept alive by `owner`.
struct GgmlWeight {
  uint32_t type = 0;
  const uint8_t* data = nullptr;
  size_t nbytes = 0, row_bytes = 0;
  int64_t rows = 0, cols = 0;
  std::vector<int32_t> row_of;
  std::shared_ptr<const void> owner;
  bool mapped = false;  // `data` lies in a read-only file mapping (release_pages)
};

struct Checkpoint {
  std::string path;
  std::string source_kind;  // "gguf", "hf", "mlx", "native" (later "compressed-tensors", "bnb")
  ModelConfig config;
  std::map<std::string, Tensor> tensors;  // HF names
  std::unique_ptr<Tokenizer> tokenizer;
  // Quantization metadata of the source, if any (null otherwise). Quantized folders (mlx,
  // native): the normalized description of formats/layouts/quantized.h, and `tensors` holds
  // the stored tensors (packed codes under the weight's name, scales/biases beside it).
  nlohmann::json quantization;
  // A vision-language folder: `config` and `tensors` are its language model under the decoder's
  // names; the vision tower, projector and the folder's own names are here (formats/vlm.h).
  // Null for a text model.
  std::shared_ptr<const Multimodal> multimodal;
  // LoadMode::Native: the weights a Linear computes from in their ggml blocks, by HF name (their
  // `tensors` entries are deferred fp32 tensors, dequantized only if something asks).
  std::map<std::string, GgmlWeight> ggml_weights;

  const Tensor& get(const std::string& name) const;  // UserError if missing
  bool has(const std::string& name) const { return tensors.count(name) != 0; }
};

// Detect the kind of `path` (a .gguf file or a folder with config.json) and load it
// (load_checkpoint.cpp, over the layouts of formats/layouts/).
// GGUF tensors are dequantized to F32 and un-permuted at load; `quantization` then records each
// tensor's source type ({"format": "gguf", "tensors": {HF name: {"gguf_name", "ggml_type",
// "nbytes"}}}). HF folder tensors are zero-copy views (F32/F16/BF16 as stored). `tokenizer` is
// null when the source has none (a GGUF without tokenizer.ggml.model, a folder without
// tokenizer.json). Every tensor of expected_tensor_shapes() must be present with its shape;
// any other tensor is refused.
// Deferred: GGUF tensors stay deferred (formats/tensor.h) and are dequantized when materialized,
// so that convert holds one tensor's fp32 copy at a time rather than the whole model's; HF folder
// tensors are mapped views either way.
// Native: as Eager, except that GGUF projection weights and the embedding in a quantized ggml type
// stay in their blocks (Checkpoint::ggml_weights) for the Linears that compute from them
// (libquant/linear/ggml_linear.cpp): memory and bytes per token as in the file.
enum class LoadMode { Eager, Deferred, Native };
Checkpoint load_checkpoint(const std::string& path, LoadMode mode = LoadMode::Eager);

// GGUF tensor name -> HF tensor name ("" when the tensor has no HF counterpart, e.g. rope_freqs).
std::string gguf_to_hf_name(const std::string& gguf_name);
// The inverse (for a GGUF writer); "" when `hf_name` has no GGUF counterpart.
std::string hf_to_gguf_name(const std::string& hf_name);
// The same for a family's own names: its norms (Gemma's four per block, OLMo 2's post-norms:
// attn_norm, post_attention_norm, ffn_norm, post_ffw_norm) and Phi-3's fused projections
// (blk.N.attn_qkv <-> self_attn.qkv_proj, blk.N.ffn_up <-> mlp.gate_up_proj: both fused).
// A mixture of experts (d.moe) as llama.cpp stores it (gguf-py tensor_mapping.py FFN_GATE_INP,
// FFN_{GATE,UP,DOWN}_EXP): blk.N.ffn_gate_inp.weight <-> the router, and each of
// blk.N.ffn_{gate,up,down}_exps.weight holds one projection of every expert, stacked
// [n_experts, rows, cols]; hf_to_gguf_name maps an expert's projection to that stacked tensor.
std::string gguf_to_hf_name(const std::string& gguf_name, const ArchDesc& d);
std::string hf_to_gguf_name(const std::string& hf_name, const ArchDesc& d);
// The HF names of a stacked expert tensor's experts, in expert order; empty when `gguf_name` is
// not one (or the model has no experts in that layer).
std::vector<std::string> gguf_expert_parts(const std::string& gguf_name, const ModelConfig& c);

// Every tensor a model of this configuration has, with its HF shape (lm_head.weight only when
// not tied). Loaders check a checkpoint against it.
std::map<std::string, std::vector<int64_t>> expected_tensor_shapes(const ModelConfig& c);

// llama.cpp's Q/K row permutation (docs/spec/gguf.md §Q/K permutation) on a row-major
// [rows, cols] matrix (cols = 1 for a bias), heads of rows / n_heads rows each.
// unpermute: GGUF order -> HF order.
std::vector<float> gguf_unpermute_rows(const float* src, int64_t rows, int64_t cols, int n_heads);
std::vector<float> gguf_permute_rows(const float* src, int64_t rows, int64_t cols, int n_heads);

}  // namespace qt
