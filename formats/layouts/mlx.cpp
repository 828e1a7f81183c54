#include "formats/layouts/mlx.h"

#include <map>
#include <tuple>

#include "formats/error.h"
#include "formats/layouts/mlx_moe.h"
#include "formats/vlm.h"

namespace qt {

using nlohmann::json;

QuantEntry mlx_tensor_names(const std::string& weight_name) {
  const std::string m = module_of(weight_name);
  QuantEntry q;
  q.data = weight_name;
  q.scales = m + ".scales";
  q.biases = m + ".biases";
  return q;
}

void write_mlx_folder(const Checkpoint& ck, const std::string& dir, HfWriteOptions opt) {
  // A mixture of experts: each projection's experts as one stacked module (formats/layouts/mlx_moe.h).
  MlxStackedExperts moe;
  if (ck.config.is_moe()) {
    moe = stack_mlx_experts(ck);
    opt.extra_tensors.insert(moe.tensors.begin(), moe.tensors.end());
    opt.omit_tensors.insert(moe.replaced.begin(), moe.replaced.end());
  }
  const json& tensors = ck.config.is_moe() ? moe.quant_tensors : ck.quantization.at("tensors");
  // The global parameters: the most common pair, so that per-module entries are the exceptions.
  std::map<std::pair<int, int>, int> count;
  for (auto& [name, e] : tensors.items()) {
    QuantEntry q = parse_quant_entry(e, name);
    if (q.scheme != "affine") user_error("{}: mlx stores only affine weights, not {}", name, q.scheme);
    ++count[{q.bits, q.group_size}];
  }
  std::pair<int, int> global{4, 64};  // mlx_lm's defaults when nothing is quantized
  int best = 0;
  for (auto& [k, n] : count)
    if (n > best) best = n, global = k;
  json block = {{"group_size", global.second}, {"bits", global.first}, {"mode", "affine"}};
  for (auto& [name, e] : tensors.items()) {
    QuantEntry q = parse_quant_entry(e, name);
    if (std::pair{q.bits, q.group_size} != global)
      block[module_of(name)] = {{"group_size", q.group_size}, {"bits", q.bits}, {"mode", "affine"}};
  }
  // --vision-bits: a vision tower's modules under mlx_vlm's paths where they differ from the global pair.
  if (ck.quantization.contains("vision"))
    for (auto& [name, e] : ck.quantization["vision"].items()) {
      QuantEntry q = parse_quant_entry(e, name);
      if (std::pair{q.bits, q.group_size} != global)
        block[mlx_vlm_module_name(module_of(name))] = {
            {"group_size", q.group_size}, {"bits", q.bits}, {"mode", "affine"}};
    }
  opt.extra_config["quantization"] = block;
  opt.extra_config["quantization_config"] = block;  // mlx_lm's save_config: "support hf model tree"
  opt.metadata = {{"format", "mlx"}};
  if (ck.quantization.contains("skipped") && !ck.quantization["skipped"].empty())
    opt.metadata["quanttool.skipped"] = ck.quantization["skipped"].dump();
  for (auto& [name, e] : tensors.items()) {
    QuantEntry q = parse_quant_entry(e, name);
    opt.keep_dtype.insert(q.scales);
    if (!q.biases.empty()) opt.keep_dtype.insert(q.biases);
  }
  write_hf_folder(ck, dir, opt);
}

bool is_mlx_quantized_config(const json& cfg) {
  if (!cfg.is_object() || !cfg.contains("quantization")) return false;
  const json& q = cfg["quantization"];
  return q.is_object() && q.contains("group_size") && q.contains("bits");
}

json mlx_describe(const std::string& dir, const json& cfg, const std::map<std::string, Tensor>& stored,
                  const std::map<std::string, std::string>& metadata) {
  const json& block = cfg.at("quantization");
  auto int_of = [&](const json& o, const char* key, const std::string& where) {
    if (!o.contains(key) || !o[key].is_number_integer())
      user_error("{}/config.json: quantization{} has no integer \"{}\"", dir, where, key);
    return o[key].get<int>();
  };
  const int g_bits = int_of(block, "bits", ""), g_group = int_of(block, "group_size", "");
  if (block.value("mode", std::string("affine")) != "affine")
    user_error("{}/config.json: quantization mode '{}' is not supported (affine)", dir, block["mode"].dump());
  json tensors = json::object();
  const std::string kSuffix = ".scales";
  for (auto& [name, t] : stored) {
    if (name.size() <= kSuffix.size() || name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      continue;
    const std::string m = name.substr(0, name.size() - kSuffix.size());
    int bits = g_bits, group = g_group;
    if (block.contains(m)) {
      const json& e = block[m];
      if (e.is_boolean() && !e.get<bool>()) continue;  // explicitly not quantized
      if (e.is_object()) {
        bits = int_of(e, "bits", "." + m);
        group = int_of(e, "group_size", "." + m);
      }
    }
    QuantEntry q = mlx_tensor_names(m + ".weight");
    auto w = stored.find(q.data);
    auto b = stored.find(q.biases);
    if (w == stored.end()) user_error("{}: {} has no {}", dir, name, q.data);
    if (b == stored.end()) user_error("{}: {} has no {}", dir, name, q.biases);
    if (w->second.shape.size() != 2 || bits <= 0 || (w->second.shape[1] * 32) % bits != 0)
      user_error("{}: {} is not a packed {}-bit matrix", dir, q.data, bits);
    q.scheme = "affine";
    q.bits = bits;
    q.group_size = group;
    q.dtype = t.dtype;
    q.rows = w->second.shape[0];
    q.cols = w->second.shape[1] * 32 / bits;
    tensors[q.data] = quant_entry_json(q);
  }
  json skipped = json::object();
  if (auto it = metadata.find("quanttool.skipped"); it != metadata.end()) {
    try {
      skipped = json::parse(it->second);
    } catch (const json::exception&) {
      skipped = json::object();  // advisory only
    }
  }
  return {{"format", "mlx"}, {"tensors", tensors}, {"skipped", skipped}};
}

}  // namespace qt
