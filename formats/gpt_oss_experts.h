// gpt_oss's fused experts. Hugging Face stores each layer's experts as
//   mlp.experts.gate_up_proj [E, hidden, 2I] (+ _bias [E, 2I]): gate in the even columns, up in
//     the odd ones (GptOssExperts._apply_gate: gate_up[..., ::2], gate_up[..., 1::2]);
//   mlp.experts.down_proj [E, I, hidden] (+ _bias [E, hidden]),
// transposed against a Linear's [out, in]; the released checkpoints hold the two weights as MXFP4
// (<name>_blocks [E, out, in/32, 16] uint8, two E2M1 codes a byte, low nibble first, and
// <name>_scales [E, out, in/32] uint8, E8M0 exponents biased by 127: transformers'
// integrations/mxfp4.py convert_moe_packed_tensors). Inside quanttool every expert is three
// Linears like qwen3_moe's, so the loader splits: mlp.experts.N.{gate,up,down}_proj.{weight,bias}
// in fp32.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "formats/tensor.h"

namespace qt {

// MXFP4 to fp32: rows × (groups·32) values from blocks [rows, groups, 16] and scales [rows, groups]
// (value = E2M1(code) · 2^(scale − 127)).
std::vector<float> mxfp4_dequantize(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t groups);

// Replaces every layer's fused expert tensors (float or MXFP4) by the per-expert ones. UserError
// naming `path` for a missing part or a wrong shape.
void split_gpt_oss_experts(const ModelConfig& c, std::map<std::string, Tensor>& tensors, const std::string& path);

// The inverse, for the hf writer: each layer's per-expert float tensors replaced by the fused
// gate_up_proj / down_proj and their biases (fp32; the writer casts). Layers whose experts are
// packed (quantized: the native and compressed-tensors writers) stay per expert.
void fuse_gpt_oss_experts(const ModelConfig& c, std::map<std::string, Tensor>& tensors);

// A released gpt_oss folder's experts as stored (MXFP4 blocks and scales), for the GGUF writer to
// copy rather than requantize (llama.cpp's conversion/gpt_oss.py repack_mxfp4); null when `ck` is
// not an HF folder whose experts are MXFP4.
std::shared_ptr<const SafetensorsDir> gpt_oss_mxfp4_source(const Checkpoint& ck);

// One expert's projection (its HF name, model.layers.L.mlp.experts.E.<gate|up|down>_proj.weight)
// as ggml block_mxfp4 rows: per 32 values the E8M0 byte as stored (ggml's 2^(e − 128) times the
// doubled E2M1 value is transformers' 2^(e − 127) times the value), then 16 bytes with element j
// in the low nibble of byte j and element j + 16 in its high nibble (transformers packs elements
// 2i, 2i + 1 into byte i). gate and up are the even and odd rows of gate_up_proj.
std::vector<uint8_t> gpt_oss_mxfp4_ggml_blocks(const SafetensorsDir& src, const ModelConfig& c,
                                               const std::string& hf_name);

}  // namespace qt
