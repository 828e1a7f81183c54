#include "libquant/kv/spec.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "formats/mapped_file.h"

namespace qt::kv {

std::string KVSpec::text() const {
  std::string s = method;
  char sep = ':';
  for (auto& [k, v] : params) {
    s += sep + k + "=" + v;
    sep = ',';
  }
  return s;
}

double KVSpec::number(const std::string& k, double fallback, const std::string& what) const {
  auto it = params.find(k);
  if (it == params.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0') user_error("{} {}: {}={} is not a number", what, text(), k, it->second);
  return v;
}

std::string KVSpec::str(const std::string& k, const std::string& fallback) const {
  auto it = params.find(k);
  return it == params.end() ? fallback : it->second;
}

KVSpec parse_kv_spec(const std::string& text, const std::string& what) {
  KVSpec s;
  const size_t colon = text.find(':');
  s.method = text.substr(0, colon);
  if (s.method.empty()) user_error("{} '{}': no method name", what, text);
  if (colon == std::string::npos) return s;
  std::string rest = text.substr(colon + 1);
  size_t p = 0;
  while (p <= rest.size()) {
    size_t q = rest.find(',', p);
    if (q == std::string::npos) q = rest.size();
    const std::string kv = rest.substr(p, q - p);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size())
      user_error("{} '{}': '{}' is not key=value", what, text, kv);
    if (!s.params.emplace(kv.substr(0, eq), kv.substr(eq + 1)).second)
      user_error("{} '{}': {} given twice", what, text, kv.substr(0, eq));
    p = q + 1;
  }
  return s;
}

std::string KVConfig::uniform_full_precision() const {
  if (k.empty()) return "";
  const std::string m = k[0].method;
  if (m != "f32" && m != "f16" && m != "bf16") return "";
  for (auto* side : {&k, &v})
    for (const KVSpec& s : *side)
      if (s.method != m || !s.params.empty()) return "";
  return m;
}

std::string KVConfig::describe() const {
  auto same = [](const std::vector<KVSpec>& x) {
    for (auto& s : x)
      if (s.text() != x[0].text()) return false;
    return true;
  };
  std::string d = (same(k) && same(v)) ? "k=" + k[0].text() + " v=" + v[0].text() : "per-layer recipe";
  return d + " (r=" + (residual < 0 ? std::string("default") : std::to_string(residual)) + ", " +
         (mode == KVMode::Decode ? "decode" : "cache") + ")";
}

KVConfig uniform_kv_config(int n_layers, const KVSpec& k, const KVSpec& v) {
  KVConfig c;
  c.k.assign(n_layers, k);
  c.v.assign(n_layers, v);
  return c;
}

KVConfig read_kv_recipe(const std::string& path, int n_layers) {
  if (!std::filesystem::is_regular_file(path)) user_error("--kv-recipe {}: no such file", path);
  MappedFile mf = map_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(mf.data), mf.size));
  } catch (const std::exception& e) {
    user_error("--kv-recipe {}: not JSON ({})", path, e.what());
  }
  if (!j.is_object() || !j.contains("k") || !j.contains("v") || !j["k"].is_array() || !j["v"].is_array())
    user_error("--kv-recipe {}: expected {{\"k\": [...], \"v\": [...]}} with one method per layer", path);
  KVConfig c;
  for (auto [key, out] : {std::pair{"k", &c.k}, std::pair{"v", &c.v}}) {
    if (int(j[key].size()) != n_layers)
      user_error("--kv-recipe {}: {} lists {} layers, the model has {}", path, key, j[key].size(), n_layers);
    for (auto& e : j[key]) {
      if (!e.is_string()) user_error("--kv-recipe {}: {} entries must be method strings", path, key);
      out->push_back(parse_kv_spec(e.get<std::string>(), "--kv-recipe " + path));
    }
  }
  return c;
}

void write_kv_recipe(const std::string& path, const KVConfig& c, const std::string& comment) {
  nlohmann::json j;
  j["comment"] = comment;
  j["n_layers"] = c.k.size();
  j["k"] = nlohmann::json::array();
  j["v"] = nlohmann::json::array();
  for (auto& s : c.k) j["k"].push_back(s.text());
  for (auto& s : c.v) j["v"].push_back(s.text());
  const std::string s = j.dump(2) + "\n";
  write_file_atomic(path, s.data(), s.size());
}

}  // namespace qt::kv
