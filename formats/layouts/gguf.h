// GGUF export: Checkpoint -> one .gguf file llama.cpp loads (GGUF v3, llama.cpp tensor names,
// the metadata convert_hf_to_gguf.py writes, Q/K rows permuted for llama/mistral, tokenizer.ggml.*
// from the tokenizer). Usage: docs/gguf.md; format facts: docs/spec/gguf.md.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/ggml_blocks.h"

namespace qt {

struct GgufExportOptions {
  // The type of every 2-D weight (embedding and output included, as `llama-quantize --pure`);
  // 1-D tensors (norms, biases, rope_freqs) are always F32, as llama-quantize keeps them.
  // Q4_K/Q5_K/Q6_K: a weight whose rows 256 does not divide gets llama.cpp's fallback type
  // (Q5_0, Q5_1, Q8_0), as llama-quantize --pure does.
  GgmlType type = GgmlType::F16;
  // --gguf-type q4_k_m / q5_k_m: llama.cpp's per-tensor mix over `type` (Q4_K / Q5_K): Q6_K for
  // the output and for attn_v / ffn_down in some layers (gguf.cpp k_mix_type says which).
  bool k_mix = false;
  std::string name;  // general.name
  // --imatrix: the importance of each input channel of a 2-D weight (HF name, `cols` values), or
  // null for a weight without statistics; block types then use ggml_quantize_weighted.
  std::function<const float*(const std::string& hf_name, int64_t cols)> importance;
  // --gptq: a weight's blocks made beforehand (calib/gptq_ggml.h: of the type gguf_weight_types
  // gives it, rows in the checkpoint's order), or null to quantize it here.
  std::function<const std::vector<uint8_t>*(const std::string& hf_name)> packed;
};

// The GGUF type of every 2-D weight write_gguf_file writes (HF name -> type; the mix's and
// llama.cpp's fallback rules applied), for calibration that runs before the write.
std::map<std::string, GgmlType> gguf_weight_types(const Checkpoint& ck, const GgufExportOptions& opt);

// --gguf-type NAME ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "q4_k",
// "q5_k", "q6_k", "q4_k_m", "q5_k_m": the mix's base type) -> type;
// nullopt when unknown. kGgufExportTypes lists the names for messages.
std::optional<GgmlType> gguf_export_type(const std::string& name);
extern const char* const kGgufExportTypes;
// Whether the --gguf-type name is a per-tensor mix (q4_k_m, q5_k_m; GgufExportOptions::k_mix).
bool gguf_export_is_mix(const std::string& name);

// Write `ck` to `path` (a temporary beside it, renamed at the end; nothing left on error).
// Tensors are made one at a time as they are written. UserError: an architecture GGUF export
// does not support, a tensor whose rows the block size does not divide (named), a tokenizer
// with no GGUF form.
void write_gguf_file(const Checkpoint& ck, const std::string& path, const GgufExportOptions& opt);

}  // namespace qt
