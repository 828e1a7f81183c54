#include "formats/layouts/output_layout.h"

#include "formats/layouts/bnb.h"
#include "formats/layouts/compressed_tensors.h"
#include "formats/layouts/mlx.h"
#include "formats/layouts/native.h"

namespace qt {

namespace {
void write_hf(const Checkpoint& ck, const std::string& dir, HfWriteOptions opt) { write_hf_folder(ck, dir, opt); }
}  // namespace

const std::vector<OutputLayout>& output_layouts() {
  static const std::vector<OutputLayout> rows = {
      {"hf", "Hugging Face folder: config.json, model.safetensors, tokenizer.json", write_hf, nullptr, nullptr},
      {"mlx", "mlx_lm folder: affine U32 weights + scales/biases, config.json quantization", write_mlx_folder,
       mlx_tensor_names, nullptr},
      {"native", "quanttool folder: any scheme, config.json quantization_config per tensor", write_native_folder,
       native_tensor_names, nullptr},
      // llm-compressor's W8A8 preset targets Linear layers and ignores lm_head.
      {"compressed-tensors", "compressed-tensors int-quantized (W8A8) folder, as llm-compressor writes",
       write_ct_folder, ct_tensor_names, "compressed-tensors quantizes Linear layers only (lm_head ignored)"},
      // transformers' bitsandbytes integration keeps the embedding and the output head float, and
      // replaces nn.Linear modules only (integrations/bitsandbytes.py replace_with_bnb_linear):
      // a mixture of experts' routers and fused 3-D expert parameters are no Linears there.
      {"bnb", "bitsandbytes NF4/FP4 folder, as transformers saves it", write_bnb_folder, bnb_tensor_names,
       "bitsandbytes (transformers) keeps the embedding and lm_head unquantized", ".quant_map",
       "bitsandbytes (transformers) quantizes nn.Linear only; routers and fused experts stay float"},
  };
  return rows;
}

const OutputLayout* find_output_layout(std::string_view name) {
  for (const OutputLayout& l : output_layouts())
    if (name == l.name) return &l;
  return nullptr;
}

std::string output_layout_names() {
  std::string s;
  for (const OutputLayout& l : output_layouts()) s += (s.empty() ? "" : ", ") + std::string(l.name);
  return s;
}

}  // namespace qt
