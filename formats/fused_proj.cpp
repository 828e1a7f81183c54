// fused_proj.h: Phi-3's qkv_proj / gate_up_proj <-> q/k/v and gate/up.
#include "formats/fused_proj.h"

#include <cstring>
#include <vector>

#include "formats/error.h"
#include "formats/layouts/quantized.h"

namespace qt {

namespace {

struct Fused {
  const char* fused;
  const char* parts[3];  // nullptr-terminated when two
};
constexpr Fused kFused[] = {
    {"self_attn.qkv_proj.weight", {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}},
    {"mlp.gate_up_proj.weight", {"mlp.gate_proj.weight", "mlp.up_proj.weight", nullptr}},
};

// Rows of each part, in order.
std::vector<int64_t> part_rows(const ModelConfig& c, const Fused& f) {
  if (f.parts[2])
    return {int64_t(c.n_heads) * c.head_dim, int64_t(c.n_kv_heads) * c.head_dim, int64_t(c.n_kv_heads) * c.head_dim};
  return {c.intermediate, c.intermediate};
}

// Rows [r0, r0 + n) of a row-major matrix, sharing its storage.
Tensor row_view(const Tensor& t, int64_t r0, int64_t n) {
  const size_t row_bytes = t.nbytes / size_t(t.shape[0]);
  Tensor v = t;
  v.shape = {n, t.shape[1]};
  v.data = t.data + size_t(r0) * row_bytes;
  v.nbytes = size_t(n) * row_bytes;
  return v;
}

}  // namespace

void split_fused_projections(const ModelConfig& c, std::map<std::string, Tensor>& tensors, const std::string& path) {
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const Fused& f : kFused) {
      auto it = tensors.find(p + f.fused);
      if (it == tensors.end()) continue;  // the tensor-set check names what is missing
      const Tensor t = materialize(it->second);
      const std::vector<int64_t> rows = part_rows(c, f);
      int64_t total = 0;
      for (int64_t r : rows) total += r;
      if (!is_float(t.dtype) || t.shape != std::vector<int64_t>{total, c.hidden})
        user_error("{}: tensor {}{} has shape {}x{}, expected [{}, {}] (float)", path, p, f.fused,
                   t.shape.size() > 0 ? t.shape[0] : 0, t.shape.size() > 1 ? t.shape[1] : 0, total, c.hidden);
      tensors.erase(it);
      int64_t r0 = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        tensors[p + f.parts[i]] = row_view(t, r0, rows[i]);
        r0 += rows[i];
      }
    }
  }
}

void fuse_projections(const ModelConfig& c, std::map<std::string, Tensor>& tensors) {
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const Fused& f : kFused) {
      if (tensors.count(p + f.fused)) continue;  // already fused (convert fused it to quantize it)
      std::vector<Tensor> parts;
      for (const char* name : f.parts) {
        if (!name) break;
        auto it = tensors.find(p + name);
        if (it == tensors.end()) user_error("{}: no tensor {}{} to fuse into {}", c.arch, p, name, f.fused);
        if (!is_float(it->second.dtype))
          user_error("{}{}: {} stores it fused ({}); quantized layouts of it are not written", p, name, c.arch,
                     f.fused);
        parts.push_back(it->second);
        tensors.erase(it);
      }
      int64_t rows = 0;
      for (auto& t : parts) rows += t.shape[0];
      const DType dt = parts[0].dtype;
      for (auto& t : parts)
        if (t.dtype != dt) user_error("{}{}: its parts have different dtypes", p, f.fused);
      tensors[p + f.fused] = deferred_tensor(dt, {rows, c.hidden}, [parts, dt, rows, c] {
        std::vector<uint8_t> bytes;
        for (const Tensor& part : parts) {
          Tensor m = materialize(part);
          bytes.insert(bytes.end(), m.data, m.data + m.nbytes);
        }
        return Tensor::owned_bytes(dt, {rows, c.hidden}, std::move(bytes));
      });
    }
  }
}

void split_fused_quantized(const ModelConfig& c, std::map<std::string, Tensor>& stored, nlohmann::json& desc,
                           const std::string& path) {
  nlohmann::json& entries = desc.at("tensors");
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const Fused& f : kFused) {
      const std::string fused = p + f.fused;
      if (!entries.contains(fused)) continue;
      const QuantEntry q = parse_quant_entry(entries[fused], path + ": " + fused);
      const std::vector<int64_t> rows = part_rows(c, f);
      int64_t total = 0;
      for (int64_t r : rows) total += r;
      if (q.rows != total || q.cols != c.hidden)
        user_error("{}: {} is [{}, {}], expected [{}, {}]", path, fused, q.rows, q.cols, total, c.hidden);
      const std::string fmod = module_of(fused);
      std::vector<QuantEntry> parts(rows.size(), q);
      for (size_t i = 0; i < rows.size(); ++i) parts[i].rows = rows[i];
      for (std::string QuantEntry::*member : {&QuantEntry::data, &QuantEntry::scales, &QuantEntry::biases}) {
        const std::string& name = q.*member;
        if (name.empty()) continue;
        auto it = stored.find(name);
        if (it == stored.end())
          user_error("{}: quantized weight {} needs tensor {}, which is missing", path, fused, name);
        if (name.rfind(fmod + ".", 0) != 0)
          user_error("{}: quantized weight {} stores {} outside its module", path, fused, name);
        const Tensor t = materialize(it->second);
        const int64_t n0 = t.shape.empty() ? 1 : t.shape[0];
        int64_t r0 = 0;
        for (size_t i = 0; i < rows.size(); ++i) {
          // The part's share of the leading dimension: its rows, or its blocks / bytes of a
          // flattened layout (bitsandbytes), which must come out whole.
          if ((n0 * rows[i]) % total != 0 || (n0 * r0) % total != 0)
            user_error("{}: {} cannot be split into {}: {} of {} rows do not fill whole blocks of {}", path, name,
                       f.parts[i], rows[i], total, q.group_size);
          const std::string part_name = module_of(p + f.parts[i]) + name.substr(fmod.size());
          Tensor v = t;
          const size_t unit = t.nbytes / size_t(n0);
          v.shape[0] = n0 * rows[i] / total;
          v.data = t.data + size_t(n0 * r0 / total) * unit;
          v.nbytes = size_t(v.shape[0]) * unit;
          stored[part_name] = v;
          parts[i].*member = part_name;
          r0 += rows[i];
        }
        stored.erase(name);
      }
      entries.erase(fused);
      for (size_t i = 0; i < rows.size(); ++i) entries[p + f.parts[i]] = quant_entry_json(parts[i]);
    }
  }
  split_fused_projections(c, stored, path);  // the fused weights left unquantized
}

}  // namespace qt
