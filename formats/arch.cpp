#include "formats/arch.h"

#include "formats/error.h"

namespace qt {

namespace {

constexpr BlockNorms kPreNorms{"input_layernorm", nullptr, "post_attention_layernorm", nullptr};
// Gemma 2/3: both sublayers normed before and after (modeling_gemma2.py Gemma2DecoderLayer).
constexpr BlockNorms kSandwichNorms{"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                                    "post_feedforward_layernorm"};
// OLMo 2: no pre-norms; each sublayer's output is normed before the residual add
// (modeling_olmo2.py Olmo2DecoderLayer).
constexpr BlockNorms kPostNorms{nullptr, "post_attention_layernorm", nullptr, "post_feedforward_layernorm"};

// qwen3_moe: model.layers.N.mlp.gate / mlp.experts.E.gate_proj (Qwen3MoeSparseMoeBlock);
// mixtral: block_sparse_moe.gate / block_sparse_moe.experts.E.w1 (gate), w3 (up), w2 (down), the
// names transformers 5 still writes on save_pretrained (it fuses the experts in memory only).
constexpr MoeNames kQwen3Moe{"mlp.gate", "mlp.experts",    "gate_proj", "up_proj", "down_proj",
                             false,      "mlp.switch_mlp", 8,           64};
constexpr MoeNames kMixtral{
    "block_sparse_moe.gate", "block_sparse_moe.experts", "w1", "w3", "w2", true, "block_sparse_moe.switch_mlp", 0, 0};
// gpt_oss: mlp.router (weight and bias) and, once split at load, mlp.experts.E.<proj> with biases;
// mlx_lm stacks them as mlp.experts.<proj>.{weight,scales,biases,bias} and quantizes the router at
// 8 bits, group 64 (models/gpt_oss.py sanitize and quant_predicate).
constexpr MoeNames kGptOss{"mlp.router", "mlp.experts", "gate_proj", "up_proj", "down_proj",
                           false,        "mlp.experts", 8,           64,        true};

using A = Activation;
using Q = QkNorm;

// clang-format off
constexpr ArchDesc kArchs[] = {
  // model_type     hf_class               gguf     reads  max_pos   theta  hdim  tied   qkv_b  qk_norm     norms           1+w    emb√H  act          gemma  fused  no_rope  moe        sinks
  {"llama",       "LlamaForCausalLM",     "llama", true,  2048,     1e4,   0,    false, false, Q::None,    kPreNorms,      false, false, A::Silu,     false, false, false,  nullptr, false},
  {"mistral",     "MistralForCausalLM",   "llama", false, 4096*32,  1e4,   0,    false, false, Q::None,    kPreNorms,      false, false, A::Silu,     false, false, false,  nullptr, false},
  {"qwen2",       "Qwen2ForCausalLM",     "qwen2", true,  32768,    1e4,   0,    false, true,  Q::None,    kPreNorms,      false, false, A::Silu,     false, false, false,  nullptr, false},
  {"qwen3",       "Qwen3ForCausalLM",     "qwen3", true,  32768,    1e4,   128,  false, false, Q::PerHead, kPreNorms,      false, false, A::Silu,     false, false, false,  nullptr, false},
  {"gemma2",      "Gemma2ForCausalLM",    "gemma2", true, 8192,     1e4,   256,  true,  false, Q::None,    kSandwichNorms, true,  true,  A::GeluTanh, true,  false, false,  nullptr, false},
  {"gemma3_text", "Gemma3ForCausalLM",    "gemma3", true, 131072,   1e6,   256,  true,  false, Q::PerHead, kSandwichNorms, true,  true,  A::GeluTanh, true,  false, false,  nullptr, false},
  {"phi3",        "Phi3ForCausalLM",      "phi3",  true,  4096,     1e4,   0,    false, false, Q::None,    kPreNorms,      false, false, A::Silu,     false, true,  false,  nullptr, false},
  {"olmo2",       "Olmo2ForCausalLM",     "",      false, 2048,     1e4,   0,    false, false, Q::Whole,   kPostNorms,     false, false, A::Silu,     false, false, false,  nullptr, false},
  {"smollm3",     "SmolLM3ForCausalLM",   "",      false, 32768,    2e6,   0,    true,  false, Q::None,    kPreNorms,      false, false, A::Silu,     false, false, true,   nullptr, false},
  {"qwen3_moe",   "Qwen3MoeForCausalLM",  "qwen3moe", true, 32768,    1e4,   0,    false, false, Q::PerHead, kPreNorms,      false, false, A::Silu,     false, false, false,  &kQwen3Moe, false},
  {"mixtral",     "MixtralForCausalLM",   "llama", true,  4096*32,  1e6,   0,    false, false, Q::None,    kPreNorms,      false, false, A::Silu,     false, false, false,  &kMixtral, false},
  {"gpt_oss",     "GptOssForCausalLM",    "gpt-oss", true, 131072,   1.5e5, 64,   false, true,  Q::None,    kPreNorms,      false, false, A::Silu,     false, false, false,  &kGptOss,   true},
};
// clang-format on

}  // namespace

const ArchDesc* arch_by_model_type(const std::string& t) {
  for (auto& r : kArchs)
    if (t == r.model_type) return &r;
  return nullptr;
}

const ArchDesc* arch_by_hf_class(const std::string& c) {
  for (auto& r : kArchs)
    if (c == r.hf_class) return &r;
  return nullptr;
}

const ArchDesc* arch_by_gguf(const std::string& a, bool moe) {
  for (auto& r : kArchs)
    if (r.gguf_reads && a == r.gguf_arch && (r.moe != nullptr) == moe) return &r;
  return nullptr;
}

const ArchDesc& arch_desc(const std::string& model_type) {
  const ArchDesc* r = arch_by_model_type(model_type);
  if (!r) user_error("unsupported architecture '{}' (supported: {})", model_type, supported_archs());
  return *r;
}

const std::string& supported_archs() {
  static const std::string s = [] {
    std::string out;
    for (auto& r : kArchs) out += (out.empty() ? "" : ", ") + std::string(r.model_type);
    return out;
  }();
  return s;
}

}  // namespace qt
