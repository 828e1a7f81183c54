// The Gemma 2 / Gemma 3 block (transformers' Gemma2DecoderLayer / Gemma3DecoderLayer):
//   x += post_attention_norm(o_proj(attention(rope(qnorm(q)), rope(knorm(k)), v)))   q,k,v of input_norm(x)
//   x += post_feedforward_norm(down(gelu_tanh(gate(h)) * up(h)))                      h = pre_feedforward_norm(x)
// Norm weights hold 1 + w (folded at load). The KV cache applies the soft-capping and the
// sliding window (KVShape::softcap, window); gemma3's sliding layers rotate with their own base.
#include "libquant/model/llama.h"
#include "libquant/model/llama_layer.h"

namespace qt {

void LlamaModel::forward_layer_gemma(int l, float* x, int n, int pos0, KVCache& cache) {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden, F = c.intermediate, D = c.head_dim;
  const int64_t Q = c.n_heads * D, KV = c.n_kv_heads * D;
  ensure_scratch(n);
  const bool local = c.rope_local_theta > 0 && c.is_sliding(l);
  ops::RopeTable& rope = local ? rope_local_ : rope_;
  rope.ensure(pos0 + n);
  float *xb = xb_.data(), *q = q_.data(), *k = k_.data(), *v = v_.data(), *att = att_.data(), *hb = hb_.data(),
        *hb2 = hb2_.data();
  const Layer& L = *layers_[l];
  // attention
  ops::rmsnorm(x, H, L.attn_norm.data(), xb, H, n, H, c.rms_eps);
  linear(*L.wq, &L.prefix, "self_attn.q_proj.weight", xb, n, q);
  linear(*L.wk, &L.prefix, "self_attn.k_proj.weight", xb, n, k);
  linear(*L.wv, &L.prefix, "self_attn.v_proj.weight", xb, n, v);
  if (c.qk_norm) {  // gemma3
    ops::rmsnorm(q, D, L.q_norm.data(), q, D, int64_t(n) * c.n_heads, D, c.rms_eps);
    ops::rmsnorm(k, D, L.k_norm.data(), k, D, int64_t(n) * c.n_kv_heads, D, c.rms_eps);
  }
  ops::rope(q, Q, n, c.n_heads, D, pos0, rope);
  ops::rope(k, KV, n, c.n_kv_heads, D, pos0, rope);
  cache.append(l, k, v, n, pos0);
  cache.attend(l, q, n, pos0, att);
  linear(*L.wo, &L.prefix, "self_attn.o_proj.weight", att, n, xb);
  ops::rmsnorm(xb, H, L.post_attn_norm.data(), xb, H, n, H, c.rms_eps);
  ops::add_inplace(x, xb, int64_t(n) * H);
  // MLP
  ops::rmsnorm(x, H, L.ffn_norm.data(), xb, H, n, H, c.rms_eps);
  linear(*L.gate, &L.prefix, "mlp.gate_proj.weight", xb, n, hb);
  linear(*L.up, &L.prefix, "mlp.up_proj.weight", xb, n, hb2);
  ops::geglu_tanh(hb, hb2, hb, n, F);
  linear(*L.down, &L.prefix, "mlp.down_proj.weight", hb, n, xb);
  ops::rmsnorm(xb, H, L.post_ffn_norm.data(), xb, H, n, H, c.rms_eps);
  ops::add_inplace(x, xb, int64_t(n) * H);
}

}  // namespace qt
