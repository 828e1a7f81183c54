#include "calib/smoothquant.h"

#include <algorithm>
#include <cmath>

#include "formats/error.h"

namespace qt::calib {

std::vector<float> smooth_scales(const std::vector<float>& a, const std::vector<float>& w, double alpha) {
  std::vector<float> s(a.size(), 1.0f);
  for (size_t j = 0; j < a.size(); ++j) {
    if (!(a[j] > 0) || !(w[j] > 0)) continue;
    const double v = std::pow(double(a[j]), alpha) / std::pow(double(w[j]), 1.0 - alpha);
    s[j] = float(std::clamp(v, 1e-5, 1e5));
  }
  return s;
}

namespace {

// A float tensor of ck as an owned fp32 [rows, cols] matrix (or vector) we may rewrite.
std::vector<float>& owned(Checkpoint& ck, const std::string& name, std::map<std::string, std::vector<float>>& m) {
  auto it = m.find(name);
  if (it == m.end()) it = m.emplace(name, to_f32(ck.get(name))).first;
  return it->second;
}

const ChannelStats& need(const ActStats& s, const std::string& name) {
  const ChannelStats* c = s.find(name);
  if (!c) user_error("act-stats: no statistics for {} (made for another model?)", name);
  return *c;
}

// max over rows of |W[r, j]| for every column j, folded into acc.
void col_absmax(const std::vector<float>& W, int64_t rows, int64_t cols, std::vector<float>& acc) {
  acc.resize(size_t(cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) acc[j] = std::max(acc[j], std::abs(W[r * cols + j]));
}

void scale_cols(std::vector<float>& W, int64_t rows, int64_t cols, const std::vector<float>& s) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) W[r * cols + j] *= s[j];
}

}  // namespace

std::map<std::string, std::vector<float>> smooth_checkpoint(Checkpoint& ck, const ActStats& stats,
                                                            const SmoothOptions& opt) {
  std::map<std::string, std::vector<float>> scales;
  const ModelConfig& c = ck.config;
  const int64_t H = c.hidden, F = c.intermediate, D = c.head_dim, Q = int64_t(c.n_heads) * D,
                KV = int64_t(c.n_kv_heads) * D, group = c.n_heads / c.n_kv_heads;
  std::map<std::string, std::vector<float>> m;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    // (norm, readers, rows of each reader, input width)
    struct Site {
      std::string norm;
      std::vector<std::string> readers;
      std::vector<int64_t> rows;
    };
    const Site sites[] = {
        {p + "input_layernorm.weight",
         {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"},
         {Q, KV, KV}},
        {p + "post_attention_layernorm.weight", {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {F, F}}};
    for (const Site& st : sites) {
      std::vector<float> wmax;
      for (size_t i = 0; i < st.readers.size(); ++i) col_absmax(owned(ck, st.readers[i], m), st.rows[i], H, wmax);
      const std::vector<float> s = smooth_scales(need(stats, st.readers[0]).absmax, wmax, opt.alpha);
      std::vector<float>& g = owned(ck, st.norm, m);
      for (int64_t j = 0; j < H; ++j) g[j] /= s[j];
      for (size_t i = 0; i < st.readers.size(); ++i) {
        scale_cols(owned(ck, st.readers[i], m), st.rows[i], H, s);
        scales[st.readers[i]] = s;
      }
    }
    if (opt.fold_vo) {
      // o_proj column i = head h, dim d reads v row (h / group)·D + d.
      const std::string vn = p + "self_attn.v_proj.weight", on = p + "self_attn.o_proj.weight";
      const std::vector<float>& oa = need(stats, on).absmax;
      std::vector<float> wo_max;
      col_absmax(owned(ck, on, m), H, Q, wo_max);
      std::vector<float> a(size_t(KV), 0.0f), w(size_t(KV), 0.0f);
      for (int64_t i = 0; i < Q; ++i) {
        const int64_t kv = (i / D) / group * D + i % D;
        a[kv] = std::max(a[kv], oa[i]);
        w[kv] = std::max(w[kv], wo_max[i]);
      }
      const std::vector<float> s = smooth_scales(a, w, opt.alpha);
      std::vector<float>& V = owned(ck, vn, m);
      for (int64_t r = 0; r < KV; ++r)
        for (int64_t j = 0; j < H; ++j) V[r * H + j] /= s[r];
      if (c.attention_bias) {
        std::vector<float>& vb = owned(ck, p + "self_attn.v_proj.bias", m);
        for (int64_t r = 0; r < KV; ++r) vb[r] /= s[r];
      }
      std::vector<float> so(static_cast<size_t>(Q));
      for (int64_t i = 0; i < Q; ++i) so[i] = s[(i / D) / group * D + i % D];
      scale_cols(owned(ck, on, m), H, Q, so);
      scales[on] = so;
    }
    if (opt.fold_up_down) {
      const std::string un = p + "mlp.up_proj.weight", dn = p + "mlp.down_proj.weight";
      std::vector<float> wd_max;
      col_absmax(owned(ck, dn, m), H, F, wd_max);
      const std::vector<float> s = smooth_scales(need(stats, dn).absmax, wd_max, opt.alpha);
      std::vector<float>& U = owned(ck, un, m);
      for (int64_t r = 0; r < F; ++r)
        for (int64_t j = 0; j < H; ++j) U[r * H + j] /= s[r];
      scale_cols(owned(ck, dn, m), H, F, s);
      scales[dn] = s;
    }
  }
  for (auto& [name, v] : m) {
    std::vector<int64_t> shape = ck.get(name).shape;
    ck.tensors[name] = Tensor::from_f32(std::move(v), shape);
  }
  return scales;
}

}  // namespace qt::calib
