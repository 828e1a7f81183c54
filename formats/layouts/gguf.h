// GGUF export: Checkpoint -> one .gguf file llama.cpp loads (GGUF v3, llama.cpp tensor names,
// the metadata convert_hf_to_gguf.py writes, Q/K rows permuted for llama/mistral, tokenizer.ggml.*
// from the tokenizer). Usage: docs/gguf.md; format facts: docs/spec/gguf.md.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/ggml_blocks.h"

namespace qt {

// --tensor-type REGEX=TYPE (llama-quantize's --tensor-type): a 2-D weight whose GGUF name the
// regex is found in (std::regex_search, ECMAScript) gets `type` instead of the mix's choice.
struct GgufTypeOverride {
  std::string pattern;  // as given, lower-cased as llama-quantize does
  std::regex regex;
  GgmlType type;
};

struct GgufExportOptions {
  // The --gguf-type name (gguf.cpp's kTypes): a plain type puts every 2-D weight (embedding and
  // output included) in that type, as `llama-quantize --pure`; a mix (q3_k_m, q4_k_s, iq4_xs_mix,
  // ...) is llama-quantize's per-tensor recipe for that file type. 1-D tensors (norms, biases,
  // rope_freqs) are always F32, as llama-quantize keeps them. A 256-block type on rows 256 does
  // not divide gets llama.cpp's fallback type (Q4_K -> Q5_0, IQ4_XS -> IQ4_NL, ...).
  std::string gguf_type = "f16";
  // Tried in order; the first match wins (then the fallback above still applies).
  std::vector<GgufTypeOverride> tensor_types;
  std::string name;  // general.name
  // --imatrix: the importance of each input channel of a 2-D weight (HF name, `cols` values), or
  // null for a weight without statistics; block types then use ggml_quantize_weighted. A mix
  // decides as llama-quantize does with an imatrix (iq4_xs_mix keeps ffn_down at the base type).
  std::function<const float*(const std::string& hf_name, int64_t cols)> importance;
  // --gptq: a weight's blocks made beforehand (calib/gptq_ggml.h: of the type gguf_weight_types
  // gives it, rows in the checkpoint's order), or null to quantize it here.
  std::function<const std::vector<uint8_t>*(const std::string& hf_name)> packed;
};

// The GGUF type of every 2-D weight write_gguf_file writes (HF name -> type; the mix's and
// llama.cpp's fallback rules applied), for calibration that runs before the write.
std::map<std::string, GgmlType> gguf_weight_types(const Checkpoint& ck, const GgufExportOptions& opt);

// --gguf-type NAME -> its type (a mix's base type: Q4_K for q4_k_m); nullopt when unknown.
// gguf_export_type_names() lists the names for messages.
std::optional<GgmlType> gguf_export_type(const std::string& name);
std::string gguf_export_type_names();

// Write `ck` to `path` (a temporary beside it, renamed at the end; nothing left on error).
// Tensors are made one at a time as they are written. UserError: an architecture GGUF export
// does not support, a tensor whose rows the block size does not divide (named), a tokenizer
// with no GGUF form.
void write_gguf_file(const Checkpoint& ck, const std::string& path, const GgufExportOptions& opt);

}  // namespace qt
