#include "libquant/schemes/recipe.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "formats/error.h"

namespace qt {

namespace fs = std::filesystem;

namespace {

// One glob without braces: `*` and `?`.
bool glob_plain(std::string_view p, std::string_view s) {
  size_t pi = 0, si = 0, star = std::string::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi, ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++, mark = si;
    } else if (star != std::string::npos) {
      pi = star + 1, si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

}  // namespace

bool glob_match(std::string_view p, std::string_view s) {
  size_t open = p.find('{');
  if (open == std::string::npos) return glob_plain(p, s);
  size_t close = p.find('}', open);
  if (close == std::string::npos) return glob_plain(p, s);
  const std::string head(p.substr(0, open)), tail(p.substr(close + 1));
  const std::string_view body = p.substr(open + 1, close - open - 1);
  size_t start = 0;
  while (true) {
    size_t comma = body.find(',', start);
    if (glob_match(head + std::string(body.substr(start, comma - start)) + tail, s)) return true;
    if (comma == std::string::npos) return false;
    start = comma + 1;
  }
}

std::string resolve_recipe(const std::string& arg, const std::string& source_dir) {
  if (fs::exists(arg) || arg.find('/') != std::string::npos || arg.find(".json") != std::string::npos) return arg;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& dir :
       {fs::path(source_dir) / "recipes", exe.parent_path() / "recipes", exe.parent_path().parent_path() / "recipes"})
    if (fs::is_regular_file(dir / (arg + ".json"))) return (dir / (arg + ".json")).string();
  user_error("--recipe {}: no such file, nor a preset (recipes/: q4-mix, q3-mix)", arg);
}

std::vector<RecipeRule> read_recipe(const std::string& path) {
  std::ifstream f(path);
  if (!f) user_error("{}: cannot read recipe", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    std::string msg = e.what();
    if (auto p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    user_error("{}: invalid JSON: {}", path, msg);
  }
  if (!j.is_object() || !j.contains("rules") || !j["rules"].is_array())
    user_error("{}: a recipe is {{\"rules\": [{{\"match\": GLOB, \"bits\"|\"group_size\"|\"keep\": ...}}]}}", path);
  std::vector<RecipeRule> rules;
  for (auto& r : j["rules"]) {
    const size_t n = rules.size() + 1;
    if (!r.is_object() || !r.contains("match") || !r["match"].is_string())
      user_error("{}: rule {} has no \"match\" string", path, n);
    RecipeRule rule;
    rule.match = r["match"];
    for (auto& [k, v] : r.items()) {
      if (k == "match" || k == "comment") continue;
      if (k == "keep" && v.is_boolean())
        rule.keep = v;
      else if (k == "bits" && v.is_number_integer())
        rule.bits = v;
      else if (k == "group_size" && v.is_number_integer())
        rule.group = v;
      else
        user_error("{}: rule {} ('{}'): unknown or mistyped key \"{}\" (bits, group_size, keep)", path, n, rule.match,
                   k);
    }
    rules.push_back(rule);
  }
  return rules;
}

}  // namespace qt
