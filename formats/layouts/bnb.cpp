#include "formats/layouts/bnb.h"

#include "formats/error.h"

namespace qt {

using nlohmann::json;

namespace {

const std::string kStatePrefix = ".quant_state.bitsandbytes__";

DType dtype_from_torch_name(const std::string& where, const std::string& s) {
  if (s == "float32") return DType::F32;
  if (s == "float16") return DType::F16;
  if (s == "bfloat16") return DType::BF16;
  user_error("{}: unsupported weight dtype '{}' in the bitsandbytes quant_state", where, s);
}

}  // namespace

QuantEntry bnb_tensor_names(const std::string& weight_name) {
  QuantEntry q;
  q.data = weight_name;
  q.scales = weight_name + ".absmax";
  return q;
}

void write_bnb_folder(const Checkpoint& ck, const std::string& dir, HfWriteOptions opt) {
  std::string type;
  DType dtype = DType::F32;
  for (auto& [name, e] : ck.quantization.at("tensors").items()) {
    QuantEntry q = parse_quant_entry(e, name);
    if (q.scheme != "nf4" && q.scheme != "fp4")
      user_error("{}: the bnb layout stores nf4/fp4 weights, not {}", name, q.scheme);
    if (!type.empty() && q.scheme != type)
      user_error("{}: one bitsandbytes config holds one quant type ({} and {})", name, type, q.scheme);
    type = q.scheme;
    dtype = q.dtype;
    if (!ck.has(name + ".quant_map")) user_error("{}: no quant_map tensor to write", name);
    // bitsandbytes' QuantState.as_dict packs these four fields, in this order, with json.dumps.
    const std::string blob = "{\"quant_type\": \"" + q.scheme + "\", \"blocksize\": " + std::to_string(q.group_size) +
                             ", \"dtype\": \"" + torch_dtype_name(q.dtype) + "\", \"shape\": [" +
                             std::to_string(q.rows) + ", " + std::to_string(q.cols) + "]}";
    opt.extra_tensors[name + kStatePrefix + q.scheme] =
        Tensor::owned_bytes(DType::U8, {int64_t(blob.size())}, std::vector<uint8_t>(blob.begin(), blob.end()));
    opt.keep_dtype.insert(q.scales);
    opt.keep_dtype.insert(name + ".quant_map");
  }
  opt.extra_config["quantization_config"] = {{"_load_in_4bit", true},
                                             {"_load_in_8bit", false},
                                             {"bnb_4bit_compute_dtype", torch_dtype_name(dtype)},
                                             {"bnb_4bit_quant_storage", "uint8"},
                                             {"bnb_4bit_quant_type", type},
                                             {"bnb_4bit_use_double_quant", false},
                                             {"llm_int8_enable_fp32_cpu_offload", false},
                                             {"llm_int8_has_fp16_weight", false},
                                             {"llm_int8_skip_modules", nullptr},
                                             {"llm_int8_threshold", 6.0},
                                             {"load_in_4bit", true},
                                             {"load_in_8bit", false},
                                             {"quant_method", "bitsandbytes"}};
  write_hf_folder(ck, dir, opt);
}

bool is_bnb_quantized_config(const json& cfg) {
  if (!cfg.is_object() || !cfg.contains("quantization_config")) return false;
  const json& q = cfg["quantization_config"];
  return q.is_object() && q.value("quant_method", "") == "bitsandbytes";
}

json bnb_describe(const std::string& dir, const json& cfg, const std::map<std::string, Tensor>& stored) {
  const json& q = cfg["quantization_config"];
  if (!q.value("load_in_4bit", false) && !q.value("_load_in_4bit", false))
    user_error("{}/config.json: only bitsandbytes 4-bit (load_in_4bit) is supported", dir);
  if (q.value("bnb_4bit_use_double_quant", false))
    user_error("{}/config.json: bitsandbytes double quantization (nested absmax) is not supported", dir);
  json tensors = json::object(), companions = json::array();
  for (auto& [name, t] : stored) {
    const size_t at = name.find(kStatePrefix);
    if (at == std::string::npos) continue;
    const std::string w = name.substr(0, at), type = name.substr(at + kStatePrefix.size());
    if (type != "nf4" && type != "fp4") user_error("{}: {}: unknown bitsandbytes quant type", dir, name);
    json st;
    try {
      st = json::parse(t.data, t.data + t.nbytes);
    } catch (const json::exception&) {
      user_error("{}: {} is not JSON", dir, name);
    }
    const json shape = st.value("shape", json::array());
    if (!shape.is_array() || shape.size() != 2 || !shape[0].is_number_integer() || !shape[1].is_number_integer())
      user_error("{}: {} has no 2-D shape", dir, name);
    if (st.value("quant_type", "") != type || !st.value("blocksize", json()).is_number_integer())
      user_error("{}: {} does not match its name or has no blocksize", dir, name);
    if (st.contains("nested_blocksize")) user_error("{}: {}: double quantization is not supported", dir, name);
    QuantEntry e = bnb_tensor_names(w);
    e.scheme = type;
    e.bits = 4;
    e.group_size = st["blocksize"].get<int>();
    e.dtype = dtype_from_torch_name(dir + ": " + name, st.value("dtype", ""));
    e.rows = shape[0].get<int64_t>();
    e.cols = shape[1].get<int64_t>();
    tensors[w] = quant_entry_json(e);
    companions.push_back(name);
    if (stored.count(w + ".quant_map")) companions.push_back(w + ".quant_map");
  }
  return {{"format", "bnb"}, {"tensors", tensors}, {"skipped", json::object()}, {"companions", companions}};
}

}  // namespace qt
