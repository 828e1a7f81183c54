// The Checkpoint type and the Llama family's tensor names (GGUF <-> HF), shapes and Q/K row order,
// which the loaders (load_checkpoint.cpp, formats/layouts/) and the GGUF writer share.
// Facts: docs/spec/gguf.md §Tensor names, §Q/K permutation.
#include "formats/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "formats/error.h"

namespace qt {

const Tensor& Checkpoint::get(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) user_error("{}: no tensor {}", path, name);
  return it->second;
}

namespace {

// Per-layer names (after "blk.N." / "model.layers.N."), docs/spec/gguf.md §Tensor names.
struct NameRow {
  const char* gguf;
  const char* hf;
};
constexpr NameRow kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},      {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},      {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},          {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},          {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},           {"ffn_down.weight", "mlp.down_proj.weight"},
};
constexpr NameRow kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// "PREFIX<digits>.rest" -> (layer, rest); false when `s` does not have that form.
bool split_layer(std::string_view s, std::string_view prefix, int* layer, std::string_view* rest) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  size_t i = prefix.size(), j = i;
  while (j < s.size() && j - i < 7 && s[j] >= '0' && s[j] <= '9') ++j;
  if (j == i || j >= s.size() || s[j] != '.') return false;
  if (s[i] == '0' && j - i > 1) return false;  // "blk.01." is not a layer name
  *layer = std::stoi(std::string(s.substr(i, j - i)));
  *rest = s.substr(j + 1);
  return true;
}
}  // namespace

std::string gguf_to_hf_name(const std::string& gguf_name) {
  for (auto& r : kGlobalNames)
    if (gguf_name == r.gguf) return r.hf;
  int layer;
  std::string_view rest;
  if (!split_layer(gguf_name, "blk.", &layer, &rest)) return "";
  for (auto& r : kLayerNames)
    if (rest == r.gguf) return "model.layers." + std::to_string(layer) + "." + r.hf;
  return "";
}

std::string hf_to_gguf_name(const std::string& hf_name) {
  for (auto& r : kGlobalNames)
    if (hf_name == r.hf) return r.gguf;
  int layer;
  std::string_view rest;
  if (!split_layer(hf_name, "model.layers.", &layer, &rest)) return "";
  for (auto& r : kLayerNames)
    if (rest == r.hf) return "blk." + std::to_string(layer) + "." + r.gguf;
  return "";
}

namespace {

// The per-layer names that depend on the family (after "blk.N." / "model.layers.N."): the four
// norm places (llama.cpp's LLM_TENSOR_ATTN_NORM, ATTN_POST_NORM, FFN_NORM, FFN_POST_NORM; a
// pre-norm family's post_attention_layernorm is its ffn_norm) and Phi-3's fused projections
// (convert_hf_to_gguf.py Phi3MiniModel: attn_qkv, and gate_up stored as ffn_up).
std::vector<std::pair<std::string, std::string>> arch_layer_names(const ArchDesc& d) {
  std::vector<std::pair<std::string, std::string>> v;
  const BlockNorms& n = d.norms;
  const std::pair<const char*, const char*> norms[] = {{"attn_norm.weight", n.attn_pre},
                                                       {"post_attention_norm.weight", n.attn_post},
                                                       {"ffn_norm.weight", n.ffn_pre},
                                                       {"post_ffw_norm.weight", n.ffn_post}};
  const bool gpt_oss = d.moe && d.moe->gpt_oss;
  for (auto& [g, hf] : norms)
    if (hf) {
      // gpt-oss's norm before the MoE is llama.cpp's ATTN_POST_NORM (src/models/openai-moe.cpp)
      const bool post = gpt_oss && std::string_view(hf) == "post_attention_layernorm";
      v.emplace_back(post ? "post_attention_norm.weight" : g, std::string(hf) + ".weight");
    }
  if (d.moe) v.emplace_back("ffn_gate_inp.weight", std::string(d.moe->router) + ".weight");
  if (gpt_oss) v.emplace_back("ffn_gate_inp.bias", std::string(d.moe->router) + ".bias");
  if (d.attn_sinks) {  // conversion/gpt_oss.py names the sinks "<...>.sinks.weight"
    v.emplace_back("attn_sinks.weight", "self_attn.sinks");
    v.emplace_back("attn_output.bias", "self_attn.o_proj.bias");
  }
  if (d.fused_proj) {
    v.emplace_back("attn_qkv.weight", "self_attn.qkv_proj.weight");
    v.emplace_back("ffn_up.weight", "mlp.gate_up_proj.weight");
  }
  return v;
}

// The stacked expert tensors (after "blk.N."), by the MoeNames member naming the projection;
// gpt-oss's experts' biases are stacked too, [n_expert, rows] (conversion/gpt_oss.py).
struct ExpertRow {
  const char* gguf;
  const char* MoeNames::*hf;
  const char* suffix;
};
constexpr ExpertRow kExpertNames[] = {
    {"ffn_gate_exps.weight", &MoeNames::gate, ".weight"}, {"ffn_up_exps.weight", &MoeNames::up, ".weight"},
    {"ffn_down_exps.weight", &MoeNames::down, ".weight"}, {"ffn_gate_exps.bias", &MoeNames::gate, ".bias"},
    {"ffn_up_exps.bias", &MoeNames::up, ".bias"},         {"ffn_down_exps.bias", &MoeNames::down, ".bias"},
};

// "<experts>.E.<proj>.weight" -> the stacked tensor's name after "blk.N."; "" for another name.
std::string expert_gguf_rest(std::string_view rest, const MoeNames& m) {
  const std::string_view experts = m.experts;
  if (rest.size() <= experts.size() + 1 || rest.substr(0, experts.size()) != experts || rest[experts.size()] != '.')
    return "";
  rest.remove_prefix(experts.size() + 1);
  size_t j = 0;
  while (j < rest.size() && rest[j] >= '0' && rest[j] <= '9') ++j;
  if (j == 0 || j >= rest.size() || rest[j] != '.') return "";
  rest.remove_prefix(j + 1);
  for (const ExpertRow& r : kExpertNames)
    if ((r.suffix[1] == 'w' || m.gpt_oss) && rest == std::string(m.*r.hf) + r.suffix) return r.gguf;
  return "";
}

bool arch_overrides(std::string_view gguf_rest, std::string_view hf_rest, const ArchDesc& d) {
  // Table rows the family replaces: the norms always, ffn_gate / ffn_up when fused.
  if (gguf_rest == "attn_norm.weight" || gguf_rest == "ffn_norm.weight") return true;
  if (hf_rest == "input_layernorm.weight" || hf_rest == "post_attention_layernorm.weight") return true;
  return d.fused_proj && (gguf_rest == "ffn_gate.weight" || gguf_rest == "ffn_up.weight" ||
                          hf_rest == "mlp.gate_proj.weight" || hf_rest == "mlp.up_proj.weight");
}

}  // namespace

std::string gguf_to_hf_name(const std::string& gguf_name, const ArchDesc& d) {
  int layer;
  std::string_view rest;
  if (!split_layer(gguf_name, "blk.", &layer, &rest)) return gguf_to_hf_name(gguf_name);
  for (auto& [g, hf] : arch_layer_names(d))
    if (rest == g) return "model.layers." + std::to_string(layer) + "." + hf;
  if (arch_overrides(rest, "", d)) return "";
  return gguf_to_hf_name(gguf_name);
}

std::string hf_to_gguf_name(const std::string& hf_name, const ArchDesc& d) {
  int layer;
  std::string_view rest;
  if (!split_layer(hf_name, "model.layers.", &layer, &rest)) return hf_to_gguf_name(hf_name);
  for (auto& [g, hf] : arch_layer_names(d))
    if (rest == hf) return "blk." + std::to_string(layer) + "." + g;
  if (d.moe)
    if (std::string g = expert_gguf_rest(rest, *d.moe); !g.empty()) return "blk." + std::to_string(layer) + "." + g;
  if (arch_overrides("", rest, d)) return "";
  return hf_to_gguf_name(hf_name);
}

std::vector<std::string> gguf_expert_parts(const std::string& gguf_name, const ModelConfig& c) {
  int layer;
  std::string_view rest;
  const MoeNames* m = c.desc().moe;
  if (!m || !split_layer(gguf_name, "blk.", &layer, &rest) || layer >= c.n_layers || !c.is_moe_layer(layer)) return {};
  for (const ExpertRow& r : kExpertNames) {
    if (rest != r.gguf || (r.suffix[1] == 'b' && !m->gpt_oss)) continue;
    std::vector<std::string> parts;
    for (int e = 0; e < c.n_experts; ++e)
      parts.push_back("model.layers." + std::to_string(layer) + "." + m->experts + "." + std::to_string(e) + "." +
                      (m->*r.hf) + r.suffix);
    return parts;
  }
  return {};
}

std::map<std::string, std::vector<int64_t>> expected_tensor_shapes(const ModelConfig& c) {
  const int64_t h = c.hidden, f = c.intermediate, q = int64_t(c.n_heads) * c.head_dim,
                kv = int64_t(c.n_kv_heads) * c.head_dim, v = c.vocab;
  std::map<std::string, std::vector<int64_t>> m;
  m["model.embed_tokens.weight"] = {v, h};
  m["model.norm.weight"] = {h};
  if (!c.tie_word_embeddings) m["lm_head.weight"] = {v, h};
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const BlockNorms& norms = c.desc().norms;
    for (const char* n : {norms.attn_pre, norms.attn_post, norms.ffn_pre, norms.ffn_post})
      if (n) m[p + n + ".weight"] = {h};
    m[p + "self_attn.q_proj.weight"] = {q, h};
    m[p + "self_attn.k_proj.weight"] = {kv, h};
    m[p + "self_attn.v_proj.weight"] = {kv, h};
    m[p + "self_attn.o_proj.weight"] = {h, q};
    if (c.is_moe_layer(i)) {  // the router and every expert (formats/arch.h MoeNames)
      const MoeNames& moe = *c.desc().moe;
      const int64_t fe = c.moe_intermediate;
      m[p + moe.router + ".weight"] = {c.n_experts, h};
      if (moe.gpt_oss) m[p + moe.router + ".bias"] = {c.n_experts};
      for (int e = 0; e < c.n_experts; ++e) {
        const std::string x = p + moe.experts + "." + std::to_string(e) + ".";
        m[x + moe.gate + ".weight"] = {fe, h};
        m[x + moe.up + ".weight"] = {fe, h};
        m[x + moe.down + ".weight"] = {h, fe};
        if (moe.gpt_oss) {
          m[x + moe.gate + ".bias"] = {fe};
          m[x + moe.up + ".bias"] = {fe};
          m[x + moe.down + ".bias"] = {h};
        }
      }
    } else {
      m[p + "mlp.gate_proj.weight"] = {f, h};
      m[p + "mlp.up_proj.weight"] = {f, h};
      m[p + "mlp.down_proj.weight"] = {h, f};
    }
    if (c.attention_bias) {
      m[p + "self_attn.q_proj.bias"] = {q};
      m[p + "self_attn.k_proj.bias"] = {kv};
      m[p + "self_attn.v_proj.bias"] = {kv};
    }
    if (c.desc().attn_sinks) {
      m[p + "self_attn.o_proj.bias"] = {h};
      m[p + "self_attn.sinks"] = {c.n_heads};
    }
    const QkNorm qk = c.desc().qk_norm;
    if (qk != QkNorm::None) {  // per head, or over the whole projection
      m[p + "self_attn.q_norm.weight"] = {qk == QkNorm::Whole ? q : c.head_dim};
      m[p + "self_attn.k_norm.weight"] = {qk == QkNorm::Whole ? kv : c.head_dim};
    }
  }
  return m;
}

// Within a head of hd rows: GGUF row 2*i + j <-> HF row j*(hd/2) + i (convert_hf_to_gguf.py
// LlamaModel.permute; docs/spec/gguf.md §Q/K permutation).
// One loop serves both directions: `to_hf` picks which side of that pairing is the source.
static std::vector<float> move_qk_rows(const float* src, int64_t rows, int64_t cols, int n_heads, bool to_hf) {
  if (n_heads <= 0 || rows % (2 * int64_t(n_heads)) != 0)
    user_error("tensor of {} rows cannot be split into {} heads of even size", rows, n_heads);
  const int64_t hd = rows / n_heads, half = hd / 2;
  std::vector<float> dst(size_t(rows * cols));
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t gguf_row = h * hd + 2 * i + j, hf_row = h * hd + j * half + i;
        const int64_t from = to_hf ? gguf_row : hf_row, to = to_hf ? hf_row : gguf_row;
        std::memcpy(&dst[size_t(to * cols)], &src[size_t(from * cols)], size_t(cols) * sizeof(float));
      }
  return dst;
}

std::vector<float> gguf_unpermute_rows(const float* src, int64_t rows, int64_t cols, int n_heads) {
  return move_qk_rows(src, rows, cols, n_heads, /*to_hf=*/true);
}

std::vector<float> gguf_permute_rows(const float* src, int64_t rows, int64_t cols, int n_heads) {
  return move_qk_rows(src, rows, cols, n_heads, /*to_hf=*/false);
}

}  // namespace qt
