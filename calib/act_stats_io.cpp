#include "calib/act_stats_io.h"

#include "calib/llama_imatrix.h"
#include "formats/error.h"
#include "formats/safetensors.h"

namespace qt::calib {

void save_act_stats(const std::string& path, const ActStats& s) {
  NamedTensors t;
  for (auto& [name, c] : s.linears) {
    const int64_t in = int64_t(c.absmax.size());
    t.emplace_back(name + ".absmax", Tensor::from_f32(c.absmax, {in}));
    t.emplace_back(name + ".sqmean", Tensor::from_f32(c.sqmean, {in}));
  }
  std::map<std::string, std::string> meta = {
      {"format", "quanttool-act-stats"}, {"tokens", std::to_string(s.tokens)}, {"text", s.text}};
  if (s.experts_with_few_tokens > 0) meta["experts_with_few_tokens"] = std::to_string(s.experts_with_few_tokens);
  write_safetensors(path, t, meta);
}

ActStats load_act_stats(const std::string& path) {
  if (!looks_like_safetensors(path)) return load_llama_imatrix(path);
  SafetensorsFile f = SafetensorsFile::open(path);
  auto it = f.metadata().find("format");
  if (it == f.metadata().end() || it->second != "quanttool-act-stats")
    user_error("{}: not an act-stats file (calibrate --method act-stats writes one)", path);
  ActStats s;
  s.tokens = std::stoll(f.metadata().count("tokens") ? f.metadata().at("tokens") : "0");
  if (f.metadata().count("text")) s.text = f.metadata().at("text");
  if (f.metadata().count("experts_with_few_tokens"))
    s.experts_with_few_tokens = std::stoi(f.metadata().at("experts_with_few_tokens"));
  for (const std::string& n : f.names()) {
    const std::string suffix = ".absmax";
    if (n.size() <= suffix.size() || n.compare(n.size() - suffix.size(), suffix.size(), suffix)) continue;
    const std::string name = n.substr(0, n.size() - suffix.size());
    ChannelStats c;
    c.absmax = to_f32(f.get(n));
    c.sqmean = to_f32(f.get(name + ".sqmean"));
    if (c.absmax.size() != c.sqmean.size()) user_error("{}: {}: absmax and sqmean differ in length", path, name);
    s.linears[name] = std::move(c);
  }
  if (s.linears.empty()) user_error("{}: holds no statistics", path);
  return s;
}

}  // namespace qt::calib
