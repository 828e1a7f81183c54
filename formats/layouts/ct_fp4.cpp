#include "formats/layouts/ct_fp4.h"

namespace qt {

using nlohmann::json;

namespace {
bool is_nv(const std::string& row) { return row == "nvfp4" || row == "nvfp4_a4"; }
bool is_mx(const std::string& row) { return row == "mxfp4" || row == "mxfp4_a4"; }

// A preset's QuantizationArgs as model_dump() writes them (fields left at their defaults omitted).
json fp4_args(bool nv, bool activations) {
  json a = {{"group_size", nv ? 16 : 32},
            {"num_bits", 4},
            {"scale_dtype", nv ? "torch.float8_e4m3fn" : "torch.uint8"},
            {"strategy", nv ? "tensor_group" : "group"},
            {"symmetric", true},
            {"type", "float"}};
  a["dynamic"] = !activations ? json(false) : nv ? json("local") : json(true);
  if (activations && nv) a["observer"] = "static_minmax";
  return a;
}
}  // namespace

const char* ct_fp4_format(const std::string& row) {
  return is_nv(row) ? "nvfp4-pack-quantized" : is_mx(row) ? "mxfp4-pack-quantized" : nullptr;
}

json ct_fp4_weights(const std::string& row) { return fp4_args(is_nv(row), false); }

json ct_fp4_activations(const std::string& row) {
  return row == "nvfp4_a4" || row == "mxfp4_a4" ? fp4_args(is_nv(row), true) : json(nullptr);
}

void ct_fp4_names(QuantEntry& q, const std::string& weight_name) {
  const std::string m = module_of(weight_name);
  q.data = m + ".weight_packed";
  q.scales = m + ".weight_scale";
  q.biases = is_nv(q.scheme) ? m + ".weight_global_scale" : "";
}

std::string ct_fp4_row(const std::string& format, const json& group) {
  for (const char* row : {"nvfp4", "nvfp4_a4", "mxfp4", "mxfp4_a4"}) {
    if (format != ct_fp4_format(row)) continue;
    if (group.value("weights", json(nullptr)) == ct_fp4_weights(row) &&
        group.value("input_activations", json(nullptr)) == ct_fp4_activations(row))
      return row;
  }
  return "";
}

}  // namespace qt
