#include "formats/layouts/mlx_moe.h"

#include <cstring>

#include "formats/error.h"
#include "formats/layouts/quantized.h"

namespace qt {

using nlohmann::json;

namespace {

// The projections: quanttool's (HF) name of each, by MoeNames member, and mlx_lm's SwitchGLU name.
struct MlxProjRow {
  const char* MoeNames::*hf;
  const char* mlx;
};
constexpr MlxProjRow kMlxProjs[] = {
    {&MoeNames::gate, "gate_proj"}, {&MoeNames::up, "up_proj"}, {&MoeNames::down, "down_proj"}};
// ".bias": gpt_oss's experts carry one (SwitchLinear(bias=True)).
constexpr const char* kMlxParts[] = {".weight", ".scales", ".biases", ".bias"};

std::string expert_module(const ModelConfig& c, int layer, int e, const MlxProjRow& p) {
  const MoeNames& m = *c.desc().moe;
  return "model.layers." + std::to_string(layer) + "." + m.experts + "." + std::to_string(e) + "." + (m.*p.hf);
}
std::string stacked_module(const ModelConfig& c, int layer, const MlxProjRow& p) {
  return "model.layers." + std::to_string(layer) + "." + c.desc().moe->mlx_switch_mlp + "." + p.mlx;
}

// n tensors of one dtype and shape as one [n, ...] tensor, made when written.
Tensor stack_experts(const std::vector<Tensor>& parts, const std::string& name) {
  for (const Tensor& t : parts)
    if (t.dtype != parts[0].dtype || t.shape != parts[0].shape)
      user_error("{}: the experts' tensors differ in dtype or shape; mlx_lm stacks them", name);
  std::vector<int64_t> shape = parts[0].shape;
  shape.insert(shape.begin(), int64_t(parts.size()));
  return deferred_tensor(parts[0].dtype, shape, [parts, shape] {
    const size_t each = parts[0].nbytes;
    std::vector<uint8_t> bytes(each * parts.size());
    for (size_t e = 0; e < parts.size(); ++e) {
      const Tensor t = materialize(parts[e]);
      std::memcpy(bytes.data() + e * each, t.data, each);
    }
    return Tensor::owned_bytes(parts[0].dtype, shape, std::move(bytes));
  });
}

}  // namespace

MlxStackedExperts stack_mlx_experts(const Checkpoint& ck) {
  const ModelConfig& c = ck.config;
  MlxStackedExperts out;
  out.quant_tensors = ck.quantization.is_object() ? ck.quantization.at("tensors") : json::object();
  json& qt = out.quant_tensors;
  for (int l = 0; l < c.n_layers; ++l) {
    if (!c.is_moe_layer(l)) continue;
    for (const MlxProjRow& p : kMlxProjs) {
      const std::string to = stacked_module(c, l, p);
      for (const char* part : kMlxParts) {
        if (!ck.tensors.count(expert_module(c, l, 0, p) + part)) continue;
        std::vector<Tensor> parts;
        for (int e = 0; e < c.n_experts; ++e) {
          const std::string name = expert_module(c, l, e, p) + part;
          auto it = ck.tensors.find(name);
          if (it == ck.tensors.end()) user_error("{}: {} is missing", ck.path, name);
          parts.push_back(it->second);
          out.replaced.insert(name);
        }
        out.tensors[to + part] = stack_experts(parts, to + part);
      }
      const std::string w0 = expert_module(c, l, 0, p) + ".weight";
      const bool quantized = qt.contains(w0);
      for (int e = 0; e < c.n_experts; ++e) {
        const std::string w = expert_module(c, l, e, p) + ".weight";
        if (qt.contains(w) != quantized ||
            (quantized && (qt[w]["bits"] != qt[w0]["bits"] || qt[w]["group_size"] != qt[w0]["group_size"])))
          user_error("{}: the experts of {} are not quantized alike; mlx_lm stacks them into one module", ck.path, to);
      }
      if (!quantized) continue;
      QuantEntry q = parse_quant_entry(qt[w0], w0);
      for (int e = 0; e < c.n_experts; ++e) qt.erase(expert_module(c, l, e, p) + ".weight");
      q.data = to + ".weight", q.scales = to + ".scales", q.biases = q.biases.empty() ? "" : to + ".biases";
      qt[q.data] = quant_entry_json(q);
    }
  }
  return out;
}

void unstack_mlx_experts(const ModelConfig& c, const std::string& dir, std::map<std::string, Tensor>* stored,
                         json* quant_block) {
  for (int l = 0; l < c.n_layers; ++l) {
    if (!c.is_moe_layer(l)) continue;
    for (const MlxProjRow& p : kMlxProjs) {
      const std::string from = stacked_module(c, l, p);
      for (const char* part : kMlxParts) {
        auto it = stored->find(from + part);
        if (it == stored->end()) continue;
        const Tensor t = it->second;
        stored->erase(it);
        if (t.shape.size() < 2 || t.shape[0] != c.n_experts || t.deferred())
          user_error("{}: {}{} has shape {}, not [{}, ...]", dir, from, part, shape_text(t.shape), c.n_experts);
        for (int e = 0; e < c.n_experts; ++e) {
          Tensor v = t;
          v.shape.erase(v.shape.begin());
          v.nbytes = t.nbytes / size_t(c.n_experts);
          v.data = t.data + size_t(e) * v.nbytes;
          (*stored)[expert_module(c, l, e, p) + part] = v;
        }
      }
      if (quant_block && quant_block->contains(from))
        for (int e = 0; e < c.n_experts; ++e) (*quant_block)[expert_module(c, l, e, p)] = (*quant_block)[from];
    }
  }
}

}  // namespace qt
