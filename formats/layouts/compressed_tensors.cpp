#include "formats/layouts/compressed_tensors.h"

#include "formats/error.h"
#include "formats/layouts/ct_fp4.h"

namespace qt {

using nlohmann::json;

namespace {

// The compressed-tensors formats read and written here, each with the scheme row it holds
// (libquant/schemes) and what its config says.
struct CtFormat {
  const char* format;
  const char* row;
  int bits;
  const char* type;      // the weights' QuantizationArgs type: "int" or "float"
  const char* act_type;  // per-token dynamic input activations of this type; nullptr: none
  bool packed;           // codes in int32 words as M.weight_packed, beside M.weight_shape
  bool groups;           // strategy "group" allowed (else "channel" only)
  int block;             // > 0: weights in block × block blocks, activations in dynamic groups of block
};
constexpr CtFormat kCtFormats[] = {
    {"int-quantized", "int8_ct", 8, "int", "int", false, true, 0},             // llm-compressor's W8A8 preset
    {"pack-quantized", "int4_ct", 4, "int", nullptr, true, true, 0},           // its W4A16 preset
    {"float-quantized", "fp8", 8, "float", "float", false, false, 0},          // its FP8_DYNAMIC preset
    {"float-quantized", "fp8_block", 8, "float", "float", false, false, 128},  // its FP8_BLOCK preset
};

const CtFormat* ct_format_of_row(const std::string& row) {
  for (const CtFormat& f : kCtFormats)
    if (row == f.row) return &f;
  return nullptr;
}

// An nvfp4- / mxfp4-pack-quantized folder: one config group whose args are exactly a preset's.
json ct_fp4_describe(const std::string& dir, const json& q, const std::map<std::string, Tensor>& stored) {
  const std::string format = q.value("format", "");
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].size() != 1)
    user_error("{}/config.json: expected one compressed-tensors config group", dir);
  const std::string row = ct_fp4_row(format, q["config_groups"].begin().value());
  if (row.empty())
    user_error("{}/config.json: {} is supported with the NVFP4A16 / NVFP4 / MXFP4A16 / MXFP4 presets' args only", dir,
               format);
  json tensors = json::object();
  const std::string kSuffix = ".weight_packed";
  for (auto& [name, t] : stored) {
    if (name.size() <= kSuffix.size() || name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      continue;
    const std::string module = name.substr(0, name.size() - kSuffix.size());
    QuantEntry e;
    e.scheme = row;
    ct_fp4_names(e, module + ".weight");
    for (const std::string& n : {e.scales, e.biases})
      if (!n.empty() && !stored.count(n)) user_error("{}: {} has no {}", dir, name, n);
    if (t.shape.size() != 2) user_error("{}: {} is not 2-D", dir, name);
    e.bits = 4;
    e.group_size = row.rfind("nvfp4", 0) == 0 ? 16 : 32;
    e.dtype = DType::BF16;  // what the package's decompress gives
    e.rows = t.shape[0];
    e.cols = t.shape[1] * 2;
    tensors[module + ".weight"] = quant_entry_json(e);
  }
  json skipped = json::object();
  for (auto& m : q.value("ignore", json::array()))
    if (m.is_string()) skipped[m.get<std::string>() + ".weight"] = "in the config's ignore list";
  return {{"format", "compressed-tensors"}, {"tensors", tensors}, {"skipped", skipped}, {"companions", json::array()}};
}

}  // namespace

bool ct_pack_quantized(const std::string& row) {
  const CtFormat* f = ct_format_of_row(row);
  return f && f->packed;
}

QuantEntry ct_tensor_names(const std::string& weight_name) {
  QuantEntry q;
  q.data = weight_name;
  q.scales = module_of(weight_name) + ".weight_scale";
  return q;
}

void write_ct_folder(const Checkpoint& ck, const std::string& dir, HfWriteOptions opt) {
  int group = -1;
  std::string scheme;
  const CtFormat* ct = nullptr;
  for (auto& [name, e] : ck.quantization.at("tensors").items()) {
    QuantEntry q = parse_quant_entry(e, name);
    ct = ct_format_of_row(q.scheme);
    if (!ct && !ct_fp4_format(q.scheme))
      user_error(
          "{}: compressed-tensors stores int8 (W8A8), int4_ct (W4A16), fp8 (FP8_DYNAMIC), fp8_block (FP8_BLOCK), nvfp4 "
          "/ "
          "nvfp4_a4 (NVFP4A16 / NVFP4) or mxfp4 / mxfp4_a4 (MXFP4A16 / MXFP4) weights here, not {}",
          name, q.scheme);
    if (!scheme.empty() && q.scheme != scheme)
      user_error("{}: compressed-tensors' single config group needs one scheme ({} and {})", name, scheme, q.scheme);
    if (group >= 0 && q.group_size != group)
      user_error("{}: compressed-tensors' single config group needs one group size ({} and {})", name, group,
                 q.group_size);
    scheme = q.scheme;
    group = q.group_size;
    opt.keep_dtype.insert(q.scales);
    if (!q.biases.empty()) opt.keep_dtype.insert(q.biases);  // nvfp4's FP32 global scale
  }
  const char* fp4 = ct_fp4_format(scheme);
  if (!ct && !fp4) user_error("{}: no quantized weight to write as compressed-tensors", dir);
  // Linear modules left unquantized (never the embedding: the preset targets Linear only).
  json ignore = json::array({"lm_head"});  // as the preset's recipe says, tied or not
  for (auto& [name, t] : ck.tensors)
    if (t.shape.size() == 2 && is_float(t.dtype) && name != "model.embed_tokens.weight" && name != "lm_head.weight" &&
        module_of(name) != name)
      ignore.push_back(module_of(name));
  if (ck.multimodal) ignore = ck.multimodal->ct_ignore(ignore);
  // W8A8: llm-compressor's W8A8 preset (int-quantized, per-token dynamic int8 activations).
  // W4A16: its W4A16 preset (pack-quantized: weight_packed int32, weight_scale, weight_shape;
  // activations unquantized). FP8_DYNAMIC: float-quantized, per-channel E4M3 weights, per-token
  // dynamic E4M3 activations. FP8_BLOCK: 128×128 weight blocks, activations in dynamic groups of 128.
  json weights, acts;
  if (fp4) {  // the NVFP4A16 / NVFP4 / MXFP4A16 / MXFP4 presets' args
    weights = ct_fp4_weights(scheme);
    acts = ct_fp4_activations(scheme);
  } else if (ct->block > 0) {
    weights = {{"num_bits", 8},
               {"type", ct->type},
               {"symmetric", true},
               {"group_size", nullptr},
               {"strategy", "block"},
               {"dynamic", false},
               {"block_structure", {ct->block, ct->block}}};
    acts = {{"num_bits", 8},           {"type", ct->act_type}, {"symmetric", true},
            {"group_size", ct->block}, {"strategy", "group"},  {"dynamic", true}};
  } else {
    weights = {{"num_bits", ct->bits},
               {"type", ct->type},
               {"symmetric", true},
               {"group_size", group > 0 ? json(group) : json(nullptr)},
               {"strategy", group > 0 ? "group" : "channel"},
               {"dynamic", false}};
    if (ct->act_type)
      acts = {{"num_bits", 8},         {"type", ct->act_type}, {"symmetric", true},
              {"group_size", nullptr}, {"strategy", "token"},  {"dynamic", true}};
  }
  opt.extra_config["quantization_config"] = {{"config_groups",
                                              {{"group_0",
                                                {{"targets", {"Linear"}},
                                                 {"weights", weights},
                                                 {"input_activations", acts},
                                                 {"output_activations", nullptr},
                                                 {"format", nullptr}}}}},
                                             {"quant_method", "compressed-tensors"},
                                             {"kv_cache_scheme", nullptr},
                                             {"format", fp4 ? fp4 : ct->format},
                                             {"quantization_status", "compressed"},
                                             {"global_compression_ratio", nullptr},
                                             {"ignore", ignore},
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
  const std::string format = q.value("format", "");
  const json* group0 = q.contains("config_groups") && q["config_groups"].is_object() && q["config_groups"].size() == 1
                           ? &q["config_groups"].begin().value()
                           : nullptr;
  // float-quantized holds FP8_DYNAMIC (channel) or FP8_BLOCK (block) weights: the strategy says which.
  const bool block = group0 && group0->value("weights", json::object()).value("strategy", "") == "block";
  const CtFormat* ct = nullptr;
  for (const CtFormat& f : kCtFormats)
    if (format == f.format && (f.block > 0) == (block && std::string(f.type) == "float")) ct = &f;
  if (!ct && (format == "nvfp4-pack-quantized" || format == "mxfp4-pack-quantized"))
    return ct_fp4_describe(dir, q, stored);
  if (!ct)
    user_error(
        "{}/config.json: compressed-tensors format '{}' is not supported (int-quantized, pack-quantized, "
        "float-quantized, nvfp4-pack-quantized, mxfp4-pack-quantized)",
        dir, q.value("format", "?"));
  const bool packed = ct->packed;
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].size() != 1)
    user_error("{}/config.json: expected one compressed-tensors config group", dir);
  const json& w = q["config_groups"].begin().value().value("weights", json::object());
  if (w.value("num_bits", 0) != ct->bits || w.value("type", "") != ct->type || !w.value("symmetric", false))
    user_error("{}/config.json: only symmetric {}-bit {} weights are supported with format {}", dir, ct->bits, ct->type,
               format);
  const std::string strategy = w.value("strategy", "");
  int group = 0;
  if (ct->block > 0) {
    if (w.value("block_structure", json()) != json::array({ct->block, ct->block}))
      user_error("{}/config.json: FP8 block weights are supported with 128×128 blocks only (the FP8_BLOCK preset)",
                 dir);
    group = ct->block;
  } else if (strategy == "group" && ct->groups)
    group = w.value("group_size", json(0)).is_number_integer() ? w["group_size"].get<int>() : 0;
  else if (strategy != "channel" || packed)
    user_error("{}/config.json: weight strategy '{}' is not supported with format {}", dir, strategy, format);
  if (std::string(ct->type) == "float") {  // our kernels round activations to E4M3 per token
    const json& a = q["config_groups"].begin().value().value("input_activations", json(nullptr));
    const bool acts_ok = ct->block > 0 ? a.is_object() && a.value("strategy", "") == "group" &&
                                             a.value("group_size", json()) == json(ct->block)
                                       : a.is_object() && a.value("strategy", "") == "token";
    if (!acts_ok || a.value("type", "") != "float" || a.value("num_bits", 0) != 8 || !a.value("dynamic", false))
      user_error(
          "{}/config.json: float-quantized weights are supported with dynamic fp8 activations per token (the "
          "FP8_DYNAMIC preset) or in groups of 128 with 128×128 weight blocks (FP8_BLOCK) only",
          dir);
  }
  json tensors = json::object(), companions = json::array();
  const std::string kSuffix = ".weight_scale";
  for (auto& [name, t] : stored) {
    if (name.size() <= kSuffix.size() || name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      continue;
    const std::string module = name.substr(0, name.size() - kSuffix.size());
    QuantEntry e = ct_tensor_names(module + ".weight");
    if (packed) e.data = module + ".weight_packed";
    auto d = stored.find(e.data);
    if (d == stored.end() || d->second.shape.size() != 2) user_error("{}: {} has no 2-D {}", dir, name, e.data);
    e.scheme = ct->row;
    e.bits = ct->bits;
    e.group_size = group;
    e.dtype = t.dtype;
    e.rows = d->second.shape[0];
    e.cols = packed ? d->second.shape[1] * 8 : d->second.shape[1];
    if (packed) {  // the logical shape, as the compressor stores it
      auto sh = stored.find(module + ".weight_shape");
      if (sh == stored.end()) user_error("{}: {} has no {}.weight_shape", dir, e.data, module);
      const Tensor shape = materialize(sh->second);
      if (shape.dtype != DType::I64 || shape.numel() != 2 || shape.as<int64_t>()[0] != e.rows ||
          shape.as<int64_t>()[1] != e.cols)
        user_error("{}: {}.weight_shape does not match {} [{}, {}/8]", dir, module, e.data, e.rows, e.cols);
      companions.push_back(module + ".weight_shape");
    }
    tensors[module + ".weight"] = quant_entry_json(e);
  }
  json skipped = json::object();
  for (auto& m : q.value("ignore", json::array()))
    if (m.is_string()) skipped[m.get<std::string>() + ".weight"] = "in the config's ignore list";
  return {{"format", "compressed-tensors"}, {"tensors", tensors}, {"skipped", skipped}, {"companions", companions}};
}

}  // namespace qt
