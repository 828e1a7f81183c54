#include "libquant/model/block_tensors.h"

#include "formats/error.h"

namespace qt {

std::vector<float> read_vector(const Checkpoint& ck, const std::string& name, int64_t n) {
  const Tensor& t = ck.get(name);
  if (t.numel() != n) user_error("{}: tensor {} has {} values, expected {}", ck.path, name, t.numel(), n);
  return to_f32(t);
}

std::vector<float> read_norm(const Checkpoint& ck, const std::string& name, int64_t n) {
  std::vector<float> w = read_vector(ck, name, n);
  if (ck.config.desc().norm_plus_one)
    for (float& x : w) x = 1.0f + x;
  return w;
}

BlockTensors read_block_tensors(const Checkpoint& ck, int layer) {
  const ModelConfig& c = ck.config;
  const ArchDesc& a = c.desc();
  const int64_t H = c.hidden, F = c.intermediate, Q = int64_t(c.n_heads) * c.head_dim,
                KV = int64_t(c.n_kv_heads) * c.head_dim;
  BlockTensors b;
  const std::string& p = b.prefix = "model.layers." + std::to_string(layer) + ".";
  auto block_norm = [&](const char* name) {
    return name ? read_norm(ck, p + name + ".weight", H) : std::vector<float>();
  };
  b.attn_pre = block_norm(a.norms.attn_pre);
  b.attn_post = block_norm(a.norms.attn_post);
  b.ffn_pre = block_norm(a.norms.ffn_pre);
  b.ffn_post = block_norm(a.norms.ffn_post);
  if (a.qk_norm != QkNorm::None) {
    const bool whole = a.qk_norm == QkNorm::Whole;
    b.q_norm = read_norm(ck, p + "self_attn.q_norm.weight", whole ? Q : c.head_dim);
    b.k_norm = read_norm(ck, p + "self_attn.k_norm.weight", whole ? KV : c.head_dim);
  }
  auto proj = [&](const char* name, bool biased, int64_t out, int64_t in) {
    ProjTensor t;
    t.weight = p + name + ".weight";
    if (biased && c.attention_bias) t.bias = p + name + ".bias";
    t.out = out, t.in = in;
    return t;
  };
  b.q = proj("self_attn.q_proj", true, Q, H);
  b.k = proj("self_attn.k_proj", true, KV, H);
  b.v = proj("self_attn.v_proj", true, KV, H);
  b.o = proj("self_attn.o_proj", a.attn_sinks, H, Q);  // gpt_oss: o_proj biased too
  b.gate = proj("mlp.gate_proj", false, F, H);
  b.up = proj("mlp.up_proj", false, F, H);
  b.down = proj("mlp.down_proj", false, H, F);
  return b;
}

std::vector<std::string> block_projections(const ModelConfig& c, int layer) {
  std::vector<std::string> p = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                "self_attn.o_proj.weight"};
  if (!c.is_moe_layer(layer)) {
    for (const char* f : {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) p.push_back(f);
    return p;
  }
  const MoeNames& m = *c.desc().moe;
  for (int e = 0; e < c.n_experts; ++e) {
    const std::string x = std::string(m.experts) + "." + std::to_string(e) + ".";
    for (const char* f : {m.gate, m.up, m.down}) p.push_back(x + f + ".weight");
  }
  return p;
}

std::string shared_input_leader(const ModelConfig& c, const std::string& proj) {
  if (proj == "self_attn.k_proj.weight" || proj == "self_attn.v_proj.weight") return "self_attn.q_proj.weight";
  if (proj == "mlp.up_proj.weight") return "mlp.gate_proj.weight";
  if (!c.is_moe()) return "";
  const MoeNames& m = *c.desc().moe;
  const std::string up = std::string(".") + m.up + ".weight", experts = std::string(m.experts) + ".";
  if (proj.rfind(experts, 0) == 0 && proj.size() > up.size() &&
      proj.compare(proj.size() - up.size(), up.size(), up) == 0)
    return proj.substr(0, proj.size() - up.size()) + "." + m.gate + ".weight";
  return "";
}

bool head_is_embedding(const Checkpoint& ck) { return ck.config.tie_word_embeddings || !ck.has("lm_head.weight"); }

}  // namespace qt
