#include "libquant/kv/kv_stats.h"

#include <cmath>

#include <fmt/format.h>

namespace qt::kv {

void KVLayerStats::add(const KVLayerStats& o) {
  for (int s = 0; s < 2; ++s) {
    cos_sum[s] += o.cos_sum[s], err2[s] += o.err2[s], norm2[s] += o.norm2[s];
    vectors[s] += o.vectors[s];
  }
  score_err2 += o.score_err2, score_ref2 += o.score_ref2, tv_sum += o.tv_sum;
  scores += o.scores, queries += o.queries;
}

void KVStats::add(int layer, const KVLayerStats& s) {
  std::lock_guard<std::mutex> lock(mu_);
  layers_.at(layer).add(s);
}

KVLayerStats KVStats::layer(int l) const {
  std::lock_guard<std::mutex> lock(mu_);
  return layers_.at(l);
}

KVLayerStats KVStats::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  KVLayerStats t;
  for (auto& l : layers_) t.add(l);
  return t;
}

bool KVStats::empty() const {
  const KVLayerStats t = total();
  return t.vectors[0] + t.vectors[1] + t.queries == 0;
}

namespace {
double ratio(double a, double b) { return b > 0 ? a / b : NAN; }
nlohmann::json row(const KVLayerStats& s) {
  nlohmann::json j;
  const char* side[2] = {"k", "v"};
  for (int i = 0; i < 2; ++i) {
    j[std::string(side[i]) + "_vectors"] = s.vectors[i];
    if (s.vectors[i] > 0) {
      j[std::string(side[i]) + "_cos"] = s.cos_sum[i] / double(s.vectors[i]);
      j[std::string(side[i]) + "_rel_mse"] = ratio(s.err2[i], s.norm2[i]);
    }
  }
  j["score_pairs"] = s.scores;
  j["queries"] = s.queries;
  if (s.scores > 0) j["score_rel_err"] = std::sqrt(ratio(s.score_err2, s.score_ref2));
  if (s.queries > 0) j["attn_tv"] = s.tv_sum / double(s.queries);
  return j;
}
std::string cell(const nlohmann::json& j, const char* k, const char* f) {
  return j.contains(k) ? fmt::format(fmt::runtime(f), j[k].get<double>()) : std::string("—");
}
}  // namespace

nlohmann::json KVStats::to_json() const {
  nlohmann::json j;
  j["layers"] = nlohmann::json::array();
  for (int l = 0; l < n_layers(); ++l) j["layers"].push_back(row(layer(l)));
  j["all"] = row(total());
  return j;
}

std::string KVStats::table() const {
  std::string s = fmt::format("{:>5}  {:>8}  {:>10}  {:>8}  {:>10}  {:>13}  {:>8}\n", "layer", "K cos", "K rel MSE",
                              "V cos", "V rel MSE", "score rel err", "attn TV");
  auto line = [&](const std::string& name, const KVLayerStats& st) {
    const nlohmann::json j = row(st);
    s += fmt::format("{:>5}  {:>8}  {:>10}  {:>8}  {:>10}  {:>13}  {:>8}\n", name, cell(j, "k_cos", "{:.5f}"),
                     cell(j, "k_rel_mse", "{:.5f}"), cell(j, "v_cos", "{:.5f}"), cell(j, "v_rel_mse", "{:.5f}"),
                     cell(j, "score_rel_err", "{:.5f}"), cell(j, "attn_tv", "{:.5f}"));
  };
  for (int l = 0; l < n_layers(); ++l) line(std::to_string(l), layer(l));
  line("all", total());
  return s;
}

}  // namespace qt::kv
