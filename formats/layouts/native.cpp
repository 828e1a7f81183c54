#include "formats/layouts/native.h"

#include "formats/error.h"

namespace qt {

using nlohmann::json;

QuantEntry native_tensor_names(const std::string& weight_name) {
  QuantEntry q;
  q.data = weight_name;
  q.scales = weight_name + "_scale";
  q.biases = weight_name + "_bias";
  return q;
}

void write_native_folder(const Checkpoint& ck, const std::string& dir, HfWriteOptions opt) {
  json tensors = ck.quantization.at("tensors");
  // The planner says whether any row quantizes activations (its scheme row's kernel family).
  opt.extra_config["quantization_config"] = {{"quant_method", "quanttool"},
                                             {"format", "native"},
                                             {"version", 1},
                                             {"activations", ck.quantization.value("activations", "none")},
                                             {"tensors", tensors},
                                             {"skipped", ck.quantization.value("skipped", json::object())}};
  opt.metadata = {{"format", "quanttool"}};
  for (auto& [name, e] : ck.quantization.at("tensors").items()) {
    QuantEntry q = parse_quant_entry(e, name);
    opt.keep_dtype.insert(q.scales);
    if (!q.biases.empty()) opt.keep_dtype.insert(q.biases);
  }
  write_hf_folder(ck, dir, opt);
}

bool is_native_quantized_config(const json& cfg) {
  if (!cfg.is_object() || !cfg.contains("quantization_config")) return false;
  const json& q = cfg["quantization_config"];
  return q.is_object() && q.value("quant_method", "") == "quanttool";
}

json native_describe(const std::string& dir, const json& cfg) {
  const json& q = cfg["quantization_config"];
  if (q.value("version", 0) != 1)
    user_error("{}/config.json: native quantization version {} is not 1", dir, q.value("version", 0));
  if (!q.contains("tensors") || !q["tensors"].is_object())
    user_error("{}/config.json: quantization_config has no \"tensors\" object", dir);
  json skipped = q.contains("skipped") && q["skipped"].is_object() ? q["skipped"] : json::object();
  return {{"format", "native"}, {"tensors", q["tensors"]}, {"skipped", skipped}};
}

}  // namespace qt
