// The decoder architectures quanttool reads, one row each. A row says everything the engine, the
// loaders and the writers need to know about a family that the config.json values do not: where
// the block's RMSNorms sit and what their tensors are called, the MLP's activation, the q/k norm,
// the embedding scale, which config fields carry per-layer facts. The block
// (libquant/model/llama.cpp), the tensor-shape check (formats/checkpoint.cpp), the HF config
// reader and writer (formats/model_config.cpp) and the GGUF writer all read the row; adding a
// Llama-like architecture is adding a row here and its golden test (tests/golden/).
//
// Sources, per family: transformers' modeling_<model_type>.py (the DecoderLayer's forward) and
// configuration_<model_type>.py (defaults); llama.cpp's convert_hf_to_gguf.py for the GGUF name.
#pragma once
#include <string>

namespace qt {

enum class Activation : unsigned char {
  Silu,      // down(silu(gate(x)) * up(x))                      (transformers "silu")
  GeluTanh,  // down(gelu_tanh(gate(x)) * up(x))                 (Gemma: "gelu_pytorch_tanh")
};

enum class QkNorm : unsigned char {
  None,
  PerHead,  // RMSNorm over each head's head_dim values, before RoPE (qwen3, gemma3)
  Whole,    // RMSNorm over the whole q (n_heads·head_dim) / k projection, before RoPE (OLMo 2)
};

// The four places a block may hold an RMSNorm, by the HF tensor name (under "model.layers.N.")
// of its weight; nullptr where the family has none. A "pre" norm feeds its sublayer, a "post"
// norm scales the sublayer's output before the residual add:
//   x += attn_post(attention(attn_pre(x)));   x += ffn_post(mlp(ffn_pre(x)))
struct BlockNorms {
  const char* attn_pre;
  const char* attn_post;
  const char* ffn_pre;
  const char* ffn_post;
};

// A mixture-of-experts FFN (the sparse layers of qwen3_moe, every layer of mixtral), by the HF
// tensor names under "model.layers.N.": the router's weight "<router>.weight" [n_experts, hidden]
// and expert e's projections "<experts>.<e>.<gate|up|down>.weight". Each token goes through the
// n_experts_per_tok experts with the highest softmax(router) probabilities, SwiGLU each, and the
// outputs are summed weighted by those probabilities (renormalised to sum 1 where the family
// always does, or where config.json's norm_topk_prob asks): transformers' <Family>TopKRouter and
// <Family>Experts (modeling_qwen3_moe.py, modeling_mixtral.py).
struct MoeNames {
  const char* router;
  const char* experts;
  const char* gate;
  const char* up;
  const char* down;
  bool always_renormalize;  // mixtral: the top-k weights always sum to 1
  // mlx_lm's module holding the experts stacked, <switch_mlp>.{gate,up,down}_proj [n_experts, ...]
  // (mlx_lm models/qwen3_moe.py, mixtral.py: sanitize and SwitchGLU).
  const char* mlx_switch_mlp;
  // mlx_lm's quant_predicate for the router (models/qwen3_moe.py: "mlp.gate" at 8 bits, group 64);
  // 0: none, the router is quantized like every Linear (mixtral.py).
  int mlx_router_bits, mlx_router_group;
  // gpt_oss (modeling_gpt_oss.py GptOssTopKRouter, GptOssExperts): the router has a bias, the
  // weights are softmax over the k largest router logits (top-k first, then softmax), every expert
  // projection has a bias, and the activation is the clamped SwiGLU (ModelConfig::swiglu_limit).
  // HF stores the experts fused (mlp.experts.gate_up_proj [E, hidden, 2I], gate and up in
  // interleaved columns; down_proj [E, I, hidden]), bf16 or MXFP4; the loader splits them into the
  // per-expert names above (formats/gpt_oss_experts.h).
  bool gpt_oss = false;
};

struct ArchDesc {
  const char* model_type;    // HF model_type, and our name for the architecture
  const char* hf_class;      // config.json architectures[0]
  const char* gguf_arch;     // llama.cpp's general.architecture for it; "" when it has none we write
  bool gguf_reads;           // from_gguf maps gguf_arch to this row (mistral's GGUFs say "llama"; a
                             // "llama" GGUF with expert_count is mixtral's, convert_hf_to_gguf.py
                             // MixtralModel)
  int default_max_position;  // the transformers config class's defaults
  double default_rope_theta;
  int default_head_dim;  // 0: hidden / heads
  bool default_tied;     // tie_word_embeddings when config.json does not say
  bool qkv_bias;         // q/k/v projections always carry a bias (qwen2)
  QkNorm qk_norm;
  BlockNorms norms;
  bool norm_plus_one;  // RMSNorm scales by (1 + w) (Gemma); folded into w at load
  bool embed_scale;    // embeddings multiplied by √hidden (Gemma)
  Activation act;
  bool gemma_attention;  // query_pre_attn_scalar, soft-caps, sliding pattern (Gemma 2/3 config)
  bool fused_proj;       // HF stores qkv_proj and gate_up_proj fused (Phi-3)
  bool no_rope_layers;   // config.json no_rope_layers: 0 marks a layer without RoPE (SmolLM3)
  const MoeNames* moe;   // mixture-of-experts FFN (qwen3_moe, mixtral); nullptr: dense MLP only
  // gpt_oss: o_proj has a bias too, and each head a learned sink logit (self_attn.sinks [heads])
  // that joins the softmax's denominator and is then dropped (modeling_gpt_oss.py
  // eager_attention_forward).
  bool attn_sinks;

  bool has_post_norms() const { return norms.attn_post || norms.ffn_post; }
};

// The row for an HF model_type, an HF class name, or a GGUF general.architecture; nullptr if none.
const ArchDesc* arch_by_model_type(const std::string& model_type);
const ArchDesc* arch_by_hf_class(const std::string& hf_class);
// `moe`: the GGUF has <arch>.expert_count > 0 (picks the row with an MoE FFN).
const ArchDesc* arch_by_gguf(const std::string& gguf_arch, bool moe);
// The row of a name ModelConfig::arch holds (always one: the readers refuse the others).
const ArchDesc& arch_desc(const std::string& model_type);
// "llama, mistral, ..." for error messages.
const std::string& supported_archs();

}  // namespace qt
