// ModelConfig: one struct for every supported decoder (the rows of formats/arch.h), read from a
// Hugging Face config.json or from GGUF metadata. What the config holds per model lives here; what
// is fixed per family (norm placement, activation, q/k norm, ...) is the arch row, desc().
// Facts: docs/spec/gguf.md §Model keys, §rope_freqs; docs/spec/hf-config.md.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/arch.h"

namespace qt {

class GgufFile;

struct RopeScaling {
  std::string type;  // "" (none), "llama3", "linear", "yarn" (gpt_oss only)
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
  // YaRN (transformers' modeling_rope_utils.py _compute_yarn_parameters): the ramp between
  // beta_fast and beta_slow rotations, floor/ceil of its ends when truncate, and cos/sin scaled
  // by attention_factor (0.1·ln(factor) + 1 when the config gives none).
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  bool truncate = true;
  float attention_factor = 0;  // 0: from factor
};

struct ModelConfig {
  std::string arch;  // HF model_type, the name of a row of formats/arch.h
  int hidden = 0;
  int intermediate = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  int max_position = 0;
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v bias (qwen2)
  RopeScaling rope_scaling;
  int bos_token_id = -1;
  int eos_token_id = -1;
  int pad_token_id = -1;
  std::string torch_dtype = "float32";

  // The family's fixed facts (norm placement, activation, q/k norm, embedding scale, ...).
  const ArchDesc& desc() const { return arch_desc(arch); }

  // Gemma 2 / 3 (desc().gemma_attention): scores scaled by query_pre_attn_scalar^-½ and
  // soft-capped (cap · tanh(s / cap)), the logits soft-capped too, some layers sliding.
  float query_pre_attn_scalar = 0;  // 0: head_dim (the score scale is its inverse square root)
  float attn_softcap = 0;           // 0: none
  float final_softcap = 0;          // 0: none
  int sliding_window = 0;           // keys a sliding layer's query sees, its own included
  std::vector<uint8_t> sliding;     // per layer, 1 = sliding-window layer; empty = all global
  float rope_local_theta = 0;       // gemma3: the sliding layers' RoPE base (no scaling); 0 = same
  bool is_sliding(int layer) const { return !sliding.empty() && sliding[size_t(layer)]; }
  // SmolLM3 (desc().no_rope_layers): per layer, 1 = the layer applies no RoPE; empty = all do.
  std::vector<uint8_t> no_rope;
  bool has_rope(int layer) const { return no_rope.empty() || !no_rope[size_t(layer)]; }
  float attn_scale() const;  // the score scale of every layer

  // Mixture of experts (desc().moe): a sparse layer's FFN is n_experts SwiGLU experts of
  // moe_intermediate rows, n_experts_per_tok of them per token (formats/arch.h MoeNames).
  // qwen3_moe: `intermediate` sizes the dense MLP of the layers in dense_mlp (mlp_only_layers,
  // decoder_sparse_step); mixtral: every layer is sparse and intermediate_size is the expert's.
  int n_experts = 0;  // 0: no sparse layer
  int n_experts_per_tok = 0;
  int moe_intermediate = 0;
  bool norm_topk_prob = false;     // top-k weights renormalised to sum 1 (always for mixtral)
  std::vector<uint8_t> dense_mlp;  // per layer, 1 = a dense MLP; empty = every layer sparse
  // gpt_oss (desc().moe->gpt_oss): the experts' clamped SwiGLU, (clamp(up, ±limit) + 1) ·
  // g·sigmoid(alpha·g) with g = min(gate, limit) (modeling_gpt_oss.py GptOssExperts._apply_gate).
  float swiglu_limit = 0;
  float swiglu_alpha = 0;
  bool is_moe() const { return n_experts > 0; }
  bool is_moe_layer(int layer) const { return is_moe() && (dense_mlp.empty() || !dense_mlp[size_t(layer)]); }

  // Phi-3 (desc().fused_proj): HF stores self_attn.qkv_proj (rows q, k, v) and mlp.gate_up_proj
  // (rows gate, up); the loader splits them into the per-projection tensors every scheme
  // quantizes, the hf writer fuses them back (formats/fused_proj.h). Its sliding_window (when
  // set) covers every layer.

  // Parse an HF config.json object; `path` names the file in errors. Refuses unsupported
  // architectures with a UserError naming them.
  static ModelConfig from_hf_json(const nlohmann::json& j, const std::string& path);
  static ModelConfig from_gguf(const GgufFile& g);
  // The config.json transformers expects for this model.
  nlohmann::json to_hf_json() const;
  // Whether llama.cpp permutes Q/K rows for this arch (its "llama" GGUFs: llama, mistral).
  bool gguf_permutes_qk() const { return std::string(desc().gguf_arch) == "llama"; }
  int64_t n_params() const;  // parameter count implied by the shapes
};

// Llama-3 scaling from a GGUF rope_freqs.weight (per-frequency divisors, docs/spec/gguf.md
// §rope_freqs): the HF parameters that reproduce it (type "" when all are 1). UserError naming
// `path` otherwise.
RopeScaling llama3_scaling_from_rope_freqs(const std::vector<float>& freqs, double theta, int head_dim,
                                           const std::string& path);
// The divisors convert_hf_to_gguf.py writes for a llama3 scaling (computed in double).
std::vector<double> llama3_rope_factors(const RopeScaling& r, double theta, int head_dim);

}  // namespace qt
