#include "formats/layouts/compressed_tensors.h"

#include "formats/error.h"

namespace qt {

using nlohmann::json;

QuantEntry ct_tensor_names(const std::string& weight_name) {
  QuantEntry q;
  q.data = weight_name;
  q.scales = module_of(weight_name) + ".weight_scale";
  return q;
}

void write_ct_folder(const Checkpoint& ck, const std::string& dir, HfWriteOptions opt) {
  int group = -1;
  for (auto& [name, e] : ck.quantization.at("tensors").items()) {
    QuantEntry q = parse_quant_entry(e, name);
    if (q.scheme != "int8_ct") user_error("{}: compressed-tensors stores int8 weights here, not {}", name, q.scheme);
    if (group >= 0 && q.group_size != group)
      user_error("{}: compressed-tensors' single config group needs one group size ({} and {})", name, group, q.group_size);
    group = q.group_size;
    opt.keep_dtype.insert(q.scales);
  }
  // Linear modules left unquantized (never the embedding: the preset targets Linear only).
  json ignore = json::array({"lm_head"});  // as the preset's recipe says, tied or not
  for (auto& [name, t] : ck.tensors)
    if (t.shape.size() == 2 && is_float(t.dtype) && name != "model.embed_tokens.weight" &&
        name != "lm_head.weight" && module_of(name) != name)
      ignore.push_back(module_of(name));
  json weights = {{"num_bits", 8}, {"type", "int"}, {"symmetric", true},
                  {"group_size", group > 0 ? json(group) : json(nullptr)},
                  {"strategy", group > 0 ? "group" : "channel"}, {"dynamic", false}};
  json acts = {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"group_size", nullptr},
               {"strategy", "token"}, {"dynamic", true}};
  opt.extra_config["quantization_config"] = {
      {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", acts},
                                      {"output_activations", nullptr}, {"format", nullptr}}}}},
      {"quant_method", "compressed-tensors"}, {"kv_cache_scheme", nullptr}, {"format", "int-quantized"},
      {"quantization_status", "compressed"}, {"global_compression_ratio", nullptr}, {"ignore", ignore},
      {"moe_sparsity_config", nullptr}};
  write_hf_folder(ck, dir, opt);
}

bool is_ct_quantized_config(const json& cfg) {
  if (!cfg.is_object() || !cfg.contains("quantization_config")) return false;
  const json& q = cfg["quantization_config"];
  return q.is_object() && q.value("quant_method", "") == "compressed-tensors";
}

json ct_describe(const std::string& dir, const json& cfg, const std::map<std::string, Tensor>& stored) {
  const json& q = cfg["quantization_config"];
  if (q.value("format", "") != "int-quantized")
    user_error("{}/config.json: compressed-tensors format '{}' is not supported (int-quantized)", dir,
               q.value("format", "?"));
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].size() != 1)
    user_error("{}/config.json: expected one compressed-tensors config group", dir);
  const json& w = q["config_groups"].begin().value().value("weights", json::object());
  if (w.value("num_bits", 0) != 8 || w.value("type", "") != "int" || !w.value("symmetric", false))
    user_error("{}/config.json: only symmetric 8-bit int weights are supported", dir);
  const std::string strategy = w.value("strategy", "");
  int group = 0;
  if (strategy == "group") group = w.value("group_size", json(0)).is_number_integer() ? w["group_size"].get<int>() : 0;
  else if (strategy != "channel") user_error("{}/config.json: weight strategy '{}' is not supported", dir, strategy);
  json tensors = json::object();
  const std::string kSuffix = ".weight_scale";
  for (auto& [name, t] : stored) {
    if (name.size() <= kSuffix.size() || name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      continue;
    QuantEntry e = ct_tensor_names(name.substr(0, name.size() - kSuffix.size()) + ".weight");
    auto d = stored.find(e.data);
    if (d == stored.end() || d->second.shape.size() != 2) user_error("{}: {} has no 2-D {}", dir, name, e.data);
    e.scheme = "int8_ct";
    e.bits = 8;
    e.group_size = group;
    e.dtype = t.dtype;
    e.rows = d->second.shape[0];
    e.cols = d->second.shape[1];
    tensors[e.data] = quant_entry_json(e);
  }
  json skipped = json::object();
  for (auto& m : q.value("ignore", json::array()))
    if (m.is_string()) skipped[m.get<std::string>() + ".weight"] = "in the config's ignore list";
  return {{"format", "compressed-tensors"}, {"tensors", tensors}, {"skipped", skipped}};
}

}  // namespace qt
