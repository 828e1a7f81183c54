#include "formats/layouts/quantized.h"

#include <set>

#include "formats/error.h"

namespace qt {

using nlohmann::json;

namespace {}  // namespace

QuantEntry parse_quant_entry(const json& e, const std::string& where) {
  QuantEntry q;
  try {
    q.scheme = e.at("scheme").get<std::string>();
    q.bits = e.at("bits").get<int>();
    q.group_size = e.at("group_size").get<int>();
    auto dt = dtype_from_name(e.at("dtype").get<std::string>());
    if (!dt) user_error("{}: unknown dtype {}", where, e.at("dtype").dump());
    q.dtype = *dt;
    auto shape = e.at("shape").get<std::vector<int64_t>>();
    if (shape.size() != 2) user_error("{}: shape must be [rows, cols]", where);
    q.rows = shape[0], q.cols = shape[1];
    q.data = e.at("data").get<std::string>();
    q.scales = e.at("scales").get<std::string>();
    if (e.contains("biases")) q.biases = e.at("biases").get<std::string>();
  } catch (const json::exception& ex) {
    std::string msg = ex.what();
    if (auto p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    user_error("{}: malformed quantization entry: {}", where, msg);
  }
  return q;
}

json quant_entry_json(const QuantEntry& q) {
  json e = {{"scheme", q.scheme},        {"bits", q.bits}, {"group_size", q.group_size}, {"dtype", dtype_name(q.dtype)},
            {"shape", {q.rows, q.cols}}, {"data", q.data}, {"scales", q.scales}};
  if (!q.biases.empty()) e["biases"] = q.biases;
  return e;
}

std::string module_of(const std::string& weight_name) {
  static const std::string kSuffix = ".weight";
  if (weight_name.size() > kSuffix.size() &&
      weight_name.compare(weight_name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0)
    return weight_name.substr(0, weight_name.size() - kSuffix.size());
  return weight_name;
}

void check_quantized_tensor_set(const std::string& dir, const ModelConfig& c,
                                const std::map<std::string, Tensor>& stored, const json& desc) {
  auto want = expected_tensor_shapes(c);
  std::set<std::string> companions;
  std::map<std::string, std::vector<int64_t>> logical;  // weight -> [rows, cols]
  std::map<std::string, std::string> alias;             // weight -> the codes' other name
  for (auto& [name, e] : desc.at("tensors").items()) {
    QuantEntry q = parse_quant_entry(e, dir + ": " + name);
    // The codes stand in for the weight: under its own name, or under another (compressed-tensors'
    // weight_packed) with the weight itself absent.
    if (q.data != name && stored.count(name))
      user_error("{}: quantized weight {} is stored both as itself and as {}", dir, name, q.data);
    for (const std::string* t : {&q.data, &q.scales, &q.biases}) {
      if (t->empty()) continue;
      if (!stored.count(*t)) user_error("{}: quantized weight {} needs tensor {}, which is missing", dir, name, *t);
      if (*t != name) companions.insert(*t);
    }
    logical[name] = {q.rows, q.cols};
    if (q.data != name) alias[name] = q.data;
  }
  // Further stored tensors a layout keeps beside the codes (bnb: quant_map, quant_state).
  for (auto& c : desc.value("companions", json::array()))
    if (c.is_string()) companions.insert(c.get<std::string>());
  for (auto& [name, t] : stored) {
    if (companions.count(name)) continue;
    auto it = want.find(name);
    if (it == want.end()) user_error("{}: tensor {} is not part of a {} model", dir, name, c.arch);
    auto lg = logical.find(name);
    const std::vector<int64_t>& shape = lg != logical.end() ? lg->second : t.shape;
    if (shape != it->second)
      user_error("{}: tensor {} has shape {}, expected {}", dir, name, shape_text(shape), shape_text(it->second));
    if (lg == logical.end() && !is_float(t.dtype))
      user_error("{}: tensor {} has dtype {} but no quantization entry", dir, name, dtype_name(t.dtype));
  }
  for (auto& [name, shape] : want)
    if (!stored.count(name) && !alias.count(name))
      user_error("{}: missing tensor {}", dir, name);
    else if (alias.count(name) && logical[name] != shape)
      user_error("{}: tensor {} has shape {}, expected {}", dir, name, shape_text(logical[name]), shape_text(shape));
}

}  // namespace qt
