// The output layouts convert writes (one row each): the writer, how a quantized weight's tensors
// are named there, and what the layout leaves unquantized. GGUF is not here: it is one file
// quantized by ggml's types (formats/layouts/gguf.h), not a folder of scheme rows.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/layouts/hf.h"
#include "formats/layouts/quantized.h"

namespace qt {

struct OutputLayout {
  const char* name;
  const char* help;
  void (*write)(const Checkpoint& ck, const std::string& dir, HfWriteOptions opt);
  // The stored tensors of a quantized weight; nullptr: the layout stores no quantized weights (hf).
  QuantEntry (*tensor_names)(const std::string& weight_name);
  // Non-null: the embedding and lm_head stay unquantized in this layout, and why.
  const char* float_embedding_and_head;
  // Non-null: every quantized weight's code book (16 fp32 values) is stored beside its codes,
  // as the codes' name + this suffix.
  const char* code_table_suffix = nullptr;
  // Non-null: a mixture of experts' routers and expert projections stay unquantized in this
  // layout, and why.
  const char* float_experts = nullptr;
};

const std::vector<OutputLayout>& output_layouts();
// The row named `name`, or nullptr.
const OutputLayout* find_output_layout(std::string_view name);
// "hf, mlx, ...", for messages.
std::string output_layout_names();

}  // namespace qt
