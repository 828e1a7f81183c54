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

std::vector<FoldSite> fold_sites(const ModelConfig& c, int layer, const SmoothOptions& opt) {
  const int64_t H = c.hidden, F = c.intermediate, D = c.head_dim, Q = int64_t(c.n_heads) * D,
                KV = int64_t(c.n_kv_heads) * D, group = c.n_heads / c.n_kv_heads;
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  std::vector<FoldSite> sites;
  sites.push_back({p + "input_layernorm.weight",
                   true,
                   {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"},
                   {Q, KV, KV},
                   H,
                   H,
                   {}});
  if (opt.fold_vo) {
    // o_proj column i = head h, dim d reads v row (h / group)·D + d.
    FoldSite s{p + "self_attn.v_proj.weight", false, {p + "self_attn.o_proj.weight"}, {H}, Q, KV, {}};
    s.scale_index.resize(size_t(Q));
    for (int64_t i = 0; i < Q; ++i) s.scale_index[i] = (i / D) / group * D + i % D;
    sites.push_back(std::move(s));
  }
  sites.push_back({p + "post_attention_layernorm.weight",
                   true,
                   {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
                   {F, F},
                   H,
                   H,
                   {}});
  if (opt.fold_up_down) sites.push_back({p + "mlp.up_proj.weight", false, {p + "mlp.down_proj.weight"}, {H}, F, F, {}});
  return sites;
}

std::vector<float> to_scale_space(const FoldSite& site, const std::vector<float>& v) {
  if (site.scale_index.empty()) return v;
  std::vector<float> r(size_t(site.n_scales), 0.0f);
  for (int64_t i = 0; i < site.cols; ++i) r[site.scale_index[i]] = std::max(r[site.scale_index[i]], v[i]);
  return r;
}

std::vector<float> to_columns(const FoldSite& site, const std::vector<float>& s) {
  if (site.scale_index.empty()) return s;
  std::vector<float> r(size_t(site.cols));
  for (int64_t i = 0; i < site.cols; ++i) r[i] = s[site.scale_index[i]];
  return r;
}

void col_absmax(const float* W, int64_t rows, int64_t cols, std::vector<float>& acc) {
  acc.resize(size_t(cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) acc[j] = std::max(acc[j], std::abs(W[r * cols + j]));
}

std::vector<float>& ScaleFolder::weight(const std::string& name) {
  auto it = m_.find(name);
  if (it == m_.end()) it = m_.emplace(name, to_f32(ck_.get(name))).first;
  return it->second;
}

void ScaleFolder::fold(const FoldSite& site, const std::vector<float>& s) {
  std::vector<float>& P = weight(site.producer);
  if (site.producer_is_norm) {
    for (int64_t j = 0; j < site.n_scales; ++j) P[j] /= s[j];
  } else {  // the producer's output row j is channel j
    const int64_t in = int64_t(P.size()) / site.n_scales;
    for (int64_t r = 0; r < site.n_scales; ++r)
      for (int64_t j = 0; j < in; ++j) P[r * in + j] /= s[r];
    const std::string bias = site.producer.substr(0, site.producer.size() - 6) + "bias";
    if (ck_.has(bias)) {
      std::vector<float>& b = weight(bias);
      for (int64_t r = 0; r < site.n_scales; ++r) b[r] /= s[r];
    }
  }
  const std::vector<float> sc = to_columns(site, s);
  for (size_t i = 0; i < site.readers.size(); ++i) {
    std::vector<float>& W = weight(site.readers[i]);
    for (int64_t r = 0; r < site.rows[i]; ++r)
      for (int64_t j = 0; j < site.cols; ++j) W[r * site.cols + j] *= sc[j];
  }
}

void ScaleFolder::finish() {
  for (auto& [name, v] : m_) {
    std::vector<int64_t> shape = ck_.get(name).shape;
    ck_.tensors[name] = Tensor::from_f32(std::move(v), shape);
  }
  m_.clear();
}

std::map<std::string, std::vector<float>> smooth_checkpoint(Checkpoint& ck, const ActStats& stats,
                                                            const SmoothOptions& opt) {
  std::map<std::string, std::vector<float>> scales;
  ScaleFolder folder(ck);
  for (int l = 0; l < ck.config.n_layers; ++l)
    for (const FoldSite& site : fold_sites(ck.config, l, opt)) {
      const ChannelStats* a = stats.find(site.readers[0], false);
      if (!a) user_error("act-stats: no statistics for {} (made for another model?)", site.readers[0]);
      std::vector<float> wmax;
      for (size_t i = 0; i < site.readers.size(); ++i)
        col_absmax(folder.weight(site.readers[i]).data(), site.rows[i], site.cols, wmax);
      const std::vector<float> s =
          smooth_scales(to_scale_space(site, a->absmax), to_scale_space(site, wmax), opt.alpha);
      folder.fold(site, s);
      for (const std::string& r : site.readers) scales[r] = to_columns(site, s);
    }
  folder.finish();
  return scales;
}

}  // namespace qt::calib
