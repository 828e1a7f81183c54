// The decoder's forward pass: one block for every arch row (forward_layer), and the loading that
// turns a Checkpoint into Linears, norms and the embedding table.
#include "libquant/model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "formats/error.h"
#include "libquant/linear/ggml_linear.h"
#include "libquant/model/block_tensors.h"
#include "libquant/model/llama_layer.h"
#include "libquant/schemes/packed_io.h"

namespace qt {

LinearFactory dense_linear_factory(Compute compute) {
  return [compute](const std::string& name, const Tensor& w, const Tensor* bias) {
    if (!is_float(w.dtype))
      user_error("{} holds packed {} codes without a quantization description", name, dtype_name(w.dtype));
    if (w.shape.size() != 2) user_error("tensor of rank {} used as a matrix", w.shape.size());
    std::vector<float> btmp;
    const float* bp = nullptr;
    if (bias) bp = bias->dtype == DType::F32 ? bias->as<float>() : (btmp = to_f32(*bias)).data();
    return make_dense_linear(w, bp, compute);
  };
}

LinearFactory checkpoint_linear_factory(const Checkpoint& ck, const PackedLinearOptions& opt) {
  LinearFactory dense = dense_linear_factory(opt.compute);
  return [&ck, opt, dense](const std::string& name, const Tensor& w, const Tensor* bias) {
    if (auto g = ck.ggml_weights.find(name); g != ck.ggml_weights.end()) {  // GGUF blocks, LoadMode::Native
      std::vector<float> b;
      if (bias) b = to_f32(*bias);
      // int8 tokens interleave the rows for the GEMV: not for an embedding table only looked up
      const bool gemv = name != "model.embed_tokens.weight" || head_is_embedding(ck);
      return make_ggml_linear(g->second, bias ? b.data() : nullptr, opt.compute,
                              opt.weight_act != WeightAct::Default && gemv);
    }
    std::optional<PackedTensor> p = packed_weight(ck, name);
    if (!p) return dense(name, w, bias);
    std::vector<float> b;
    if (bias) b = to_f32(*bias);
    return make_packed_linear(std::move(*p), bias ? b.data() : nullptr, opt);
  };
}

LlamaModel::LlamaModel(const Checkpoint& ck, const LinearFactory& make_linear, Checkpoint* consume)
    : cfg_(ck.config), desc_(arch_by_model_type(ck.config.arch)) {
  const ModelConfig& c = cfg_;
  if (!desc_) user_error("{}: architecture '{}' is not supported ({})", ck.path, c.arch, supported_archs());
  const ArchDesc& a = *desc_;
  if (c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads || c.head_dim % 2 || c.hidden <= 0 ||
      c.vocab <= 0 || c.n_layers <= 0)
    user_error("{}: inconsistent head configuration ({} heads, {} kv heads, head_dim {})", ck.path, c.n_heads,
               c.n_kv_heads, c.head_dim);

  auto lin = [&](const std::string& name, const std::string& bias_name, int64_t out, int64_t in) {
    const std::string stored = stored_codes_name(ck, name);
    const Tensor& w = ck.get(stored);
    if (is_float(w.dtype) && w.shape != std::vector<int64_t>{out, in})
      user_error("{}: tensor {} has an unexpected shape", ck.path, name);
    const Tensor* b = bias_name.empty() ? nullptr : &ck.get(bias_name);
    auto l = make_linear(name, w, b);
    if (l->in_features() != in || l->out_features() != out)
      user_error("{}: Linear for {} has shape [{}, {}], expected [{}, {}]", ck.path, name, l->out_features(),
                 l->in_features(), out, in);
    if (consume) {
      // A Linear that copied its weight lets go of the source pages it read: otherwise the mapped
      // file stays resident beside the copy (eval's peak RSS would be source + packed weights).
      if (!l->borrows_weights()) release_pages(w);
      if (b) release_pages(*b);
      consume->tensors.erase(stored);
      if (!bias_name.empty()) consume->tensors.erase(bias_name);
    }
    return l;
  };

  const int64_t H = c.hidden;
  const Tensor& emb = ck.get("model.embed_tokens.weight");
  if (is_float(emb.dtype) && !ck.ggml_weights.count("model.embed_tokens.weight")) {
    embedding_ = emb;
    if (embedding_.shape != std::vector<int64_t>{c.vocab, H})
      user_error("{}: model.embed_tokens.weight has an unexpected shape", ck.path);
  } else {  // packed codes: a Linear that can hand out rows, and the output head when tied
    embed_q_ = lin("model.embed_tokens.weight", "", c.vocab, H);
  }
  final_norm_ = read_norm(ck, "model.norm.weight", H);
  for (int i = 0; i < c.n_layers; ++i) {
    auto L = std::make_unique<Layer>();
    BlockTensors t = read_block_tensors(ck, i);
    const std::string& p = L->prefix = t.prefix;
    L->attn_pre = std::move(t.attn_pre);
    L->attn_post = std::move(t.attn_post);
    L->ffn_pre = std::move(t.ffn_pre);
    L->ffn_post = std::move(t.ffn_post);
    L->q_norm = std::move(t.q_norm);
    L->k_norm = std::move(t.k_norm);
    auto proj = [&](const ProjTensor& x) { return lin(x.weight, x.bias, x.out, x.in); };
    L->wq = proj(t.q);
    L->wk = proj(t.k);
    L->wv = proj(t.v);
    L->wo = proj(t.o);
    if (a.attn_sinks) L->sinks = read_vector(ck, p + "self_attn.sinks", c.n_heads);
    if (c.is_moe_layer(i)) {
      const MoeNames& moe = *a.moe;
      const int64_t FE = c.moe_intermediate;
      L->router_name = std::string(moe.router) + ".weight";
      // gpt_oss: the router and every expert projection carry a bias
      auto bias = [&](const std::string& x) { return moe.gpt_oss ? p + x + ".bias" : std::string(); };
      L->router = lin(p + L->router_name, bias(moe.router), c.n_experts, H);
      for (int e = 0; e < c.n_experts; ++e) {
        Layer::Expert X;
        const std::string x = std::string(moe.experts) + "." + std::to_string(e) + ".";
        X.gate_name = x + moe.gate + ".weight";
        X.up_name = x + moe.up + ".weight";
        X.down_name = x + moe.down + ".weight";
        X.gate = lin(p + X.gate_name, bias(x + moe.gate), FE, H);
        X.up = lin(p + X.up_name, bias(x + moe.up), FE, H);
        X.down = lin(p + X.down_name, bias(x + moe.down), H, FE);
        L->experts.push_back(std::move(X));
      }
    } else {
      L->gate = proj(t.gate);
      L->up = proj(t.up);
      L->down = proj(t.down);
    }
    layers_.push_back(std::move(L));
  }
  if (head_is_embedding(ck) && embed_q_) {
    lm_head_ = embed_q_;
  } else if (head_is_embedding(ck)) {
    auto l = make_linear("lm_head.weight", embedding_, nullptr);
    if (l->in_features() != H || l->out_features() != c.vocab)
      user_error("{}: output head has the wrong shape", ck.path);
    lm_head_ = std::move(l);
  } else {
    lm_head_ = lin("lm_head.weight", "", c.vocab, H);
  }
  rope_ = ops::RopeTable(c);
  if (c.rope_local_theta > 0) rope_local_ = ops::RopeTable(c, c.rope_local_theta);
  if (consume) consume->tensors.clear();  // norms were copied; the embedding is shared
}

LlamaModel::~LlamaModel() = default;

std::unique_ptr<KVCache> LlamaModel::make_cache(int max_ctx, const std::string& method) const {
  return make_kv_cache(method, kv_shape(max_ctx));
}

std::unique_ptr<KVCache> LlamaModel::make_cache(int max_ctx, const kv::KVConfig& config) const {
  return make_kv_cache(config, kv_shape(max_ctx));
}

KVShape LlamaModel::kv_shape(int max_ctx) const {
  KVShape s;
  s.n_layers = cfg_.n_layers;
  s.n_heads = cfg_.n_heads;
  s.n_kv_heads = cfg_.n_kv_heads;
  s.head_dim = cfg_.head_dim;
  s.max_ctx = max_ctx;
  s.scale = cfg_.attn_scale();
  // Key codecs that undo RoPE need each layer's table: gemma3's sliding layers have their own base.
  s.rope_inv_freq = rope_.inv_freq();
  if (cfg_.rope_local_theta > 0 && rope_local_.inv_freq() != rope_.inv_freq()) {
    s.rope_local_inv_freq = rope_local_.inv_freq();
    s.rope_local.resize(size_t(cfg_.n_layers));
    for (int l = 0; l < cfg_.n_layers; ++l) s.rope_local[size_t(l)] = cfg_.is_sliding(l) ? 1 : 0;
  }
  if (!cfg_.no_rope.empty()) {
    // Layers without RoPE (SmolLM3) take the second table with every frequency 0: rotating by
    // angle 0 is exactly the identity (cos 1, sin 0). No family has both kinds of second table.
    if (!s.rope_local.empty()) user_error("{}: both local-RoPE and no-RoPE layers", cfg_.arch);
    s.rope_local_inv_freq.assign(size_t(cfg_.head_dim / 2), 0.0f);
    s.rope_local = cfg_.no_rope;
  }
  s.softcap = cfg_.attn_softcap;
  if (desc_->attn_sinks)
    for (const auto& L : layers_) s.sinks.push_back(L->sinks);
  if (!cfg_.sliding.empty())  // gemma, phi3
    for (int l = 0; l < cfg_.n_layers; ++l) s.window.push_back(cfg_.is_sliding(l) ? cfg_.sliding_window : 0);
  return s;
}

size_t LlamaModel::weight_bytes() const {
  size_t b = embedding_.nbytes + final_norm_.size() * 4 + lm_head_->weight_bytes();
  if (embed_q_ && embed_q_ != lm_head_) b += embed_q_->weight_bytes();
  for (auto& L : layers_) {
    for (const Linear* l :
         {L->wq.get(), L->wk.get(), L->wv.get(), L->wo.get(), L->gate.get(), L->up.get(), L->down.get()})
      if (l) b += l->weight_bytes();
    if (L->router) b += L->router->weight_bytes();
    for (const Layer::Expert& X : L->experts)
      b += X.gate->weight_bytes() + X.up->weight_bytes() + X.down->weight_bytes();
    b += (L->attn_pre.size() + L->attn_post.size() + L->ffn_pre.size() + L->ffn_post.size() + L->q_norm.size() +
          L->k_norm.size()) *
         4;
  }
  return b;
}

size_t LlamaModel::token_weight_bytes() const {
  size_t table = embedding_.nbytes;
  if (embed_q_ && embed_q_ != lm_head_) table += embed_q_->weight_bytes();
  return weight_bytes() - table;
}

std::string LlamaModel::linear_kind() const { return layers_.empty() ? "" : layers_[0]->wq->kind(); }

void LlamaModel::ensure_scratch(ForwardScratch& s, int n) const {
  if (n <= s.cap) return;
  const size_t H = cfg_.hidden, F = cfg_.intermediate, Q = size_t(cfg_.n_heads) * cfg_.head_dim,
               KV = size_t(cfg_.n_kv_heads) * cfg_.head_dim;
  for (auto* b : {&s.x, &s.xb, &s.att}) b->resize(size_t(n) * std::max(H, Q));
  s.q.resize(size_t(n) * Q);
  s.k.resize(size_t(n) * KV);
  s.v.resize(size_t(n) * KV);
  s.hb.resize(size_t(n) * F);
  s.hb2.resize(size_t(n) * F);
  s.cap = n;
}

size_t LlamaModel::scratch_bytes(int n) const {
  const size_t H = cfg_.hidden, F = cfg_.intermediate, Q = size_t(cfg_.n_heads) * cfg_.head_dim,
               KV = size_t(cfg_.n_kv_heads) * cfg_.head_dim;
  return size_t(n) * (3 * std::max(H, Q) + Q + 2 * KV + 2 * F) * sizeof(float);
}

void LlamaModel::reserve_positions(int n_pos) {
  rope_.ensure(n_pos);
  if (cfg_.rope_local_theta > 0) rope_local_.ensure(n_pos);
}

void LlamaModel::linear(const Linear& l, const std::string* prefix, const char* name, const float* x, int64_t n,
                        float* y) {
  if (observer_) observer_(prefix ? *prefix + name : std::string(name), x, n, l.in_features());
  l.forward(x, n, y);
}

void LlamaModel::linears(const Linear* const* ls, const char* const* names, int count, const std::string* prefix,
                         const float* x, int64_t n, float* const* ys) {
  if (observer_)
    for (int i = 0; i < count; ++i)
      observer_(prefix ? *prefix + names[i] : std::string(names[i]), x, n, ls[i]->in_features());
  forward_shared_input(ls, count, x, n, ys);
}

namespace {
// Gemma multiplies the embedding by √hidden, a float32 constant in transformers' fp32 forward
// (the engine's activations are fp32 whatever the checkpoint's dtype).
void scale_embedding(float* x, int64_t H) {
  const float s = float(std::sqrt(double(H)));
  for (int64_t d = 0; d < H; ++d) x[d] *= s;
}
}  // namespace

void LlamaModel::embed(const int32_t* tokens, int n, float* x) const {
  const int64_t H = cfg_.hidden;
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= cfg_.vocab)
      user_error("token id {} is outside the vocabulary (0..{})", tokens[i], cfg_.vocab - 1);
#pragma omp parallel for schedule(static) if (n >= 64)
  for (int i = 0; i < n; ++i) {
    const int64_t off = int64_t(tokens[i]) * H;
    float* xr = x + i * H;
    if (embed_q_) {
      embed_q_->dequantize_row(tokens[i], xr);
      if (desc_->embed_scale) scale_embedding(xr, H);
      continue;
    }
    switch (embedding_.dtype) {
      case DType::F32: std::memcpy(xr, embedding_.as<float>() + off, H * sizeof(float)); break;
      case DType::BF16:
        for (int64_t d = 0; d < H; ++d) xr[d] = bf16_to_f32(embedding_.as<uint16_t>()[off + d]);
        break;
      case DType::F16:
        for (int64_t d = 0; d < H; ++d) xr[d] = f16_to_f32(embedding_.as<uint16_t>()[off + d]);
        break;
      default: break;  // rejected by the checkpoint loader
    }
    if (desc_->embed_scale) scale_embedding(xr, H);
  }
}

void LlamaModel::forward(const int32_t* tokens, int n, int pos0, KVCache& cache, int out_first, int n_out,
                         float* logits) {
  if (out_first < 0 || n_out < 0 || out_first + n_out > n)
    user_error("forward: output rows {}..{} outside the batch of {}", out_first, out_first + n_out, n);
  if (n == 1 && decode_ready()) return forward_token(tokens[0], pos0, cache, n_out == 1 ? logits : nullptr);
  const float* h = forward_hidden(tokens, n, pos0, cache);
  if (n_out > 0) output_head(h + int64_t(out_first) * cfg_.hidden, n_out, logits);
}

void LlamaModel::output_head(const float* hidden, int rows, float* logits) {
  linear(*lm_head_, nullptr, "lm_head.weight", hidden, rows, logits);
  if (cfg_.final_softcap > 0) ops::softcap_inplace(logits, int64_t(rows) * cfg_.vocab, cfg_.final_softcap);
}

const float* LlamaModel::forward_hidden(const int32_t* tokens, int n, int pos0, KVCache& cache) {
  return forward_hidden(tokens, n, pos0, cache, scratch_);
}

const float* LlamaModel::forward_hidden(const int32_t* tokens, int n, int pos0, KVCache& cache, ForwardScratch& s) {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden;
  if (n <= 0) return nullptr;
  ensure_scratch(s, n);
  float *x = s.x.data(), *xb = s.xb.data();

  embed(tokens, n, x);
  for (int l = 0; l < c.n_layers; ++l) forward_layer(l, x, n, pos0, cache, s);
  ops::rmsnorm(x, H, final_norm_.data(), xb, H, n, H, c.rms_eps);
  return xb;
}

ops::RopeTable* LlamaModel::rope_of(int l) {
  if (!cfg_.has_rope(l)) return nullptr;
  return cfg_.rope_local_theta > 0 && cfg_.is_sliding(l) ? &rope_local_ : &rope_;
}

void LlamaModel::forward_layer(int l, float* x, int n, int pos0, KVCache& cache) {
  forward_layer(l, x, n, pos0, cache, scratch_);
}

void LlamaModel::forward_layer(int l, float* x, int n, int pos0, KVCache& cache, ForwardScratch& s) {
  const ModelConfig& c = cfg_;
  const ArchDesc& a = *desc_;
  const int64_t H = c.hidden, F = c.intermediate, D = c.head_dim;
  const int64_t Q = c.n_heads * D, KV = c.n_kv_heads * D;
  if (l < 0 || l >= c.n_layers) user_error("forward_layer: layer {} outside 0..{}", l, c.n_layers - 1);
  ensure_scratch(s, n);
  ops::RopeTable* rope = rope_of(l);
  if (rope) rope->ensure(pos0 + n);  // only reads the table once reserve_positions covered pos0 + n
  float *xb = s.xb.data(), *q = s.q.data(), *k = s.k.data(), *v = s.v.data(), *att = s.att.data(), *hb = s.hb.data(),
        *hb2 = s.hb2.data();
  const Layer& L = *layers_[l];
  const float eps = c.rms_eps;
  // x through the norm w into xb, or x itself where the row has no such norm
  auto pre = [&](const std::vector<float>& w) -> const float* {
    if (w.empty()) return x;
    ops::rmsnorm(x, H, w.data(), xb, H, n, H, eps);
    return xb;
  };
  // the sublayer's output in xb, normed in place where the row has a post-norm, added to x
  auto add_post = [&](const std::vector<float>& w) {
    if (!w.empty()) ops::rmsnorm(xb, H, w.data(), xb, H, n, H, eps);
    ops::add_inplace(x, xb, int64_t(n) * H);
  };
  // attention
  const float* in = pre(L.attn_pre);
  {
    const Linear* ls[] = {L.wq.get(), L.wk.get(), L.wv.get()};
    const char* names[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"};
    float* ys[] = {q, k, v};
    linears(ls, names, 3, &L.prefix, in, n, ys);
  }
  if (a.qk_norm == QkNorm::PerHead) {
    ops::rmsnorm(q, D, L.q_norm.data(), q, D, int64_t(n) * c.n_heads, D, eps);
    ops::rmsnorm(k, D, L.k_norm.data(), k, D, int64_t(n) * c.n_kv_heads, D, eps);
  } else if (a.qk_norm == QkNorm::Whole) {
    ops::rmsnorm(q, Q, L.q_norm.data(), q, Q, n, Q, eps);
    ops::rmsnorm(k, KV, L.k_norm.data(), k, KV, n, KV, eps);
  }
  if (rope) {
    ops::rope(q, Q, n, c.n_heads, D, pos0, *rope);
    ops::rope(k, KV, n, c.n_kv_heads, D, pos0, *rope);
  }
  cache.append(l, k, v, n, pos0);
  cache.attend(l, q, n, pos0, att);
  linear(*L.wo, &L.prefix, "self_attn.o_proj.weight", att, n, xb);
  add_post(L.attn_post);
  // MLP
  in = pre(L.ffn_pre);
  if (L.router) {
    moe_ffn(L, in, n, xb == in ? att : xb, s);
    if (xb == in) std::memcpy(xb, att, sizeof(float) * size_t(n) * size_t(H));
    add_post(L.ffn_post);
    return;
  }
  {
    const Linear* ls[] = {L.gate.get(), L.up.get()};
    const char* names[] = {"mlp.gate_proj.weight", "mlp.up_proj.weight"};
    float* ys[] = {hb, hb2};
    linears(ls, names, 2, &L.prefix, in, n, ys);
  }
  if (a.act == Activation::GeluTanh)
    ops::geglu_tanh(hb, hb2, hb, n, F);
  else
    ops::swiglu(hb, hb2, hb, n, F);
  linear(*L.down, &L.prefix, "mlp.down_proj.weight", hb, n, xb);
  add_post(L.ffn_post);
}

// A mixture-of-experts FFN (qwen3_moe's sparse layers, every mixtral layer), as transformers'
// <Family>TopKRouter + <Family>Experts compute it (modeling_qwen3_moe.py, modeling_mixtral.py):
//   p = softmax(router(h)) in fp32;  the k largest p_e (torch.topk), divided by their sum where
//   the family or norm_topk_prob says;  out = Σ_e p_e · down_e(silu(gate_e(h)) * up_e(h)),
//   the experts' contributions added in ascending expert order (transformers' index_add_ loop).
// Grouped on the CPU: the tokens are bucketed by expert, and each expert with tokens runs its
// three projections once over its gathered rows (each a GEMM through its Linear, any kind), so
// the work is n·k rows of expert GEMMs however many experts there are, with no per-token loop
// through a projection.
namespace {
// gpt_oss's expert activation into g (GptOssExperts._apply_gate): g = min(g, limit),
// u = clamp(u, −limit, limit), g · sigmoid(alpha · g) · (u + 1).
void clamped_swiglu(float* g, const float* u, int64_t n, float alpha, float limit) {
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(g[i], limit), y = std::clamp(u[i], -limit, limit);
    g[i] = (y + 1.0f) * (x * (1.0f / (1.0f + std::exp(-(x * alpha)))));
  }
}
}  // namespace

void LlamaModel::moe_ffn(const Layer& L, const float* in, int n, float* out, ForwardScratch& s) {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden, F = c.moe_intermediate;
  const int E = c.n_experts, K = c.n_experts_per_tok;
  s.moe_probs.resize(size_t(n) * E);
  linear(*L.router, &L.prefix, L.router_name.c_str(), in, n, s.moe_probs.data());

  // Routing: per token its k experts and weights, then the (token, weight) pairs by expert.
  std::vector<int> count(size_t(E) + 1, 0);
  std::vector<int> sel(size_t(n) * K);
  std::vector<float> wsel(size_t(n) * K);
  std::vector<int> order(static_cast<size_t>(E));
  const bool gpt_oss = desc_->moe->gpt_oss;
  for (int t = 0; t < n; ++t) {
    float* p = s.moe_probs.data() + size_t(t) * E;
    if (gpt_oss) {  // top-k of the logits, then softmax over those k (GptOssTopKRouter)
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + K, order.end(),
                        [p](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
      const float mx = p[order[0]];
      float sum = 0;
      for (int j = 0; j < K; ++j) sum += std::exp(p[order[size_t(j)]] - mx);
      for (int j = 0; j < K; ++j) {
        const int e = order[size_t(j)];
        sel[size_t(t) * K + j] = e;
        wsel[size_t(t) * K + j] = std::exp(p[e] - mx) / sum;
        ++count[size_t(e) + 1];
      }
      continue;
    }
    const float mx = *std::max_element(p, p + E);
    float sum = 0;
    for (int e = 0; e < E; ++e) sum += p[e] = std::exp(p[e] - mx);
    for (int e = 0; e < E; ++e) p[e] /= sum;
    // torch.topk: the largest values; among equal values the lower index first.
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [p](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float top = 0;
    for (int j = 0; j < K; ++j) top += p[order[size_t(j)]];
    for (int j = 0; j < K; ++j) {
      const int e = order[size_t(j)];
      sel[size_t(t) * K + j] = e;
      wsel[size_t(t) * K + j] = c.norm_topk_prob ? p[e] / top : p[e];
      ++count[size_t(e) + 1];
    }
  }
  std::partial_sum(count.begin(), count.end(), count.begin());  // count[e]: expert e's first slot
  std::vector<int> tok(size_t(n) * K);
  std::vector<float> wt(size_t(n) * K);
  {
    std::vector<int> fill(count.begin(), count.end() - 1);
    for (int t = 0; t < n; ++t)  // tokens in ascending order within each expert
      for (int j = 0; j < K; ++j) {
        const int e = sel[size_t(t) * K + j], slot = fill[size_t(e)]++;
        tok[size_t(slot)] = t;
        wt[size_t(slot)] = wsel[size_t(t) * K + j];
      }
  }

  std::memset(out, 0, sizeof(float) * size_t(n) * size_t(H));
  size_t most = 0;
  for (int e = 0; e < E; ++e) most = std::max(most, size_t(count[size_t(e) + 1] - count[size_t(e)]));
  s.moe_x.resize(most * size_t(H));
  s.moe_y.resize(most * size_t(H));
  s.moe_g.resize(most * size_t(F));
  s.moe_u.resize(most * size_t(F));
  for (int e = 0; e < E; ++e) {
    const int s0 = count[size_t(e)], m = count[size_t(e) + 1] - s0;
    if (m == 0) continue;
    const Layer::Expert& X = L.experts[size_t(e)];
#pragma omp parallel for schedule(static) if (int64_t(m) * H >= (1 << 16))
    for (int i = 0; i < m; ++i)
      std::memcpy(s.moe_x.data() + size_t(i) * H, in + size_t(tok[size_t(s0 + i)]) * H, sizeof(float) * size_t(H));
    linear(*X.gate, &L.prefix, X.gate_name.c_str(), s.moe_x.data(), m, s.moe_g.data());
    linear(*X.up, &L.prefix, X.up_name.c_str(), s.moe_x.data(), m, s.moe_u.data());
    if (gpt_oss)
      clamped_swiglu(s.moe_g.data(), s.moe_u.data(), int64_t(m) * F, c.swiglu_alpha, c.swiglu_limit);
    else
      ops::swiglu(s.moe_g.data(), s.moe_u.data(), s.moe_g.data(), m, F);
    linear(*X.down, &L.prefix, X.down_name.c_str(), s.moe_g.data(), m, s.moe_y.data());
    // An expert sees a token at most once: its rows add into distinct output rows.
#pragma omp parallel for schedule(static) if (int64_t(m) * H >= (1 << 16))
    for (int i = 0; i < m; ++i) {
      float* o = out + size_t(tok[size_t(s0 + i)]) * H;
      const float* y = s.moe_y.data() + size_t(i) * H;
      const float w = wt[size_t(s0 + i)];
      for (int64_t d = 0; d < H; ++d) o[d] += y[d] * w;
    }
  }
}

void LlamaModel::final_norm(const float* x, int n, float* out) const {
  ops::rmsnorm(x, cfg_.hidden, final_norm_.data(), out, cfg_.hidden, n, cfg_.hidden, cfg_.rms_eps);
}

void LlamaModel::set_linear(int l, const std::string& name, std::unique_ptr<Linear> lin) {
  if (l < 0 || l >= cfg_.n_layers) user_error("set_linear: layer {} outside 0..{}", l, cfg_.n_layers - 1);
  Layer& L = *layers_[l];
  std::unique_ptr<Linear>* slot = name == "self_attn.q_proj.weight"   ? &L.wq
                                  : name == "self_attn.k_proj.weight" ? &L.wk
                                  : name == "self_attn.v_proj.weight" ? &L.wv
                                  : name == "self_attn.o_proj.weight" ? &L.wo
                                  : name == "mlp.gate_proj.weight"    ? &L.gate
                                  : name == "mlp.up_proj.weight"      ? &L.up
                                  : name == "mlp.down_proj.weight"    ? &L.down
                                                                      : nullptr;
  for (Layer::Expert& X : L.experts)  // a sparse layer: "<experts>.<e>.<gate|up|down>.weight"
    if (!slot)
      slot = name == X.gate_name ? &X.gate : name == X.up_name ? &X.up : name == X.down_name ? &X.down : nullptr;
  if (!slot || !*slot) user_error("set_linear: no projection '{}' in block {}", name, l);
  if (lin->in_features() != (*slot)->in_features() || lin->out_features() != (*slot)->out_features())
    user_error("set_linear: {} of layer {} has another shape", name, l);
  *slot = std::move(lin);
}

}  // namespace qt
