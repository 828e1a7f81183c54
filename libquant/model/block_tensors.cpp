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

bool head_is_embedding(const Checkpoint& ck) { return ck.config.tie_word_embeddings || !ck.has("lm_head.weight"); }

}  // namespace qt
