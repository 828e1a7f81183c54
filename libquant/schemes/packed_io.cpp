// packed_weight: a quantized folder's normalized description (formats/layouts/quantized.h) +
// its stored tensors -> a PackedTensor whose tensors are views of the checkpoint's storage,
// reshaped to packed_layout's shapes (layouts store the same bytes under other shapes, e.g.
// compressed-tensors' [out, 1] scales or bitsandbytes' flat absmax).
#include "libquant/schemes/packed_io.h"

#include "formats/error.h"
#include "formats/layouts/quantized.h"

namespace qt {

namespace {

bool is_quantized_folder(const Checkpoint& ck) {
  return ck.quantization.is_object() && ck.quantization.contains("tensors") && ck.source_kind != "gguf";
}

Tensor view_as(const Checkpoint& ck, const std::string& stored, const TensorSpec& want, const std::string& weight) {
  const Tensor& t = ck.get(stored);
  if (t.dtype != want.dtype || t.nbytes != want.nbytes())
    user_error("{}: {}: tensor {} is {} of {} bytes, expected {} of {} bytes", ck.path, weight, stored,
               dtype_name(t.dtype), t.nbytes, dtype_name(want.dtype), want.nbytes());
  Tensor v = t;  // shares storage
  v.shape = want.shape;
  return v;
}

}  // namespace

std::optional<PackedTensor> packed_weight(const Checkpoint& ck, const std::string& weight_name) {
  if (!is_quantized_folder(ck)) return std::nullopt;
  const auto& tensors = ck.quantization["tensors"];
  auto it = tensors.find(weight_name);
  if (it == tensors.end()) return std::nullopt;
  const std::string where = ck.path + ": " + weight_name;
  QuantEntry q = parse_quant_entry(*it, where);
  PackedTensor p;
  p.params.scheme = q.scheme;
  p.params.bits = q.bits;
  p.params.group_size = q.group_size;
  p.params.dtype = q.dtype;
  p.rows = q.rows;
  p.cols = q.cols;
  validate_scheme(p.params, q.rows, q.cols, where);
  PackedLayout l = packed_layout(p.params, q.rows, q.cols);
  p.data = view_as(ck, q.data, l.data, weight_name);
  p.scales = view_as(ck, q.scales, l.scales, weight_name);
  if (l.biases) {
    if (q.biases.empty()) user_error("{}: {} weight without biases", where, q.scheme);
    p.biases = view_as(ck, q.biases, *l.biases, weight_name);
  }
  check_packed(p, where);
  return p;
}

std::string stored_codes_name(const Checkpoint& ck, const std::string& weight_name) {
  if (ck.has(weight_name) || !is_quantized_folder(ck)) return weight_name;
  const auto& tensors = ck.quantization["tensors"];
  auto it = tensors.find(weight_name);
  if (it == tensors.end()) return weight_name;
  return parse_quant_entry(*it, ck.path + ": " + weight_name).data;
}

std::map<std::string, std::string> quantized_tensor_owners(const Checkpoint& ck) {
  std::map<std::string, std::string> owners;
  if (!is_quantized_folder(ck)) return owners;
  for (auto& [weight, e] : ck.quantization["tensors"].items()) {
    const QuantEntry q = parse_quant_entry(e, ck.path + ": " + weight);
    for (const std::string& n : {q.data, q.scales, q.biases})
      if (!n.empty()) owners[n] = weight;
  }
  return owners;
}

double checkpoint_bits_per_weight(const Checkpoint& ck) {
  uint64_t bytes = 0;
  int64_t weights = 0;
  for (auto& [name, t] : ck.tensors) {
    bytes += t.nbytes;
    if (is_float(t.dtype)) weights += t.numel();
  }
  if (is_quantized_folder(ck))
    for (auto& [name, e] : ck.quantization["tensors"].items()) {
      QuantEntry q = parse_quant_entry(e, ck.path + ": " + name);
      weights += q.rows * q.cols;
      // The packed codes were not counted as weights above; their scales (float) were.
      for (const std::string* s : {&q.scales, &q.biases})
        if (!s->empty() && ck.has(*s)) weights -= ck.get(*s).numel();
    }
  return weights > 0 ? 8.0 * double(bytes) / double(weights) : 0.0;
}

}  // namespace qt
