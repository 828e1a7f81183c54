// fused_proj.h: Phi-3's qkv_proj / gate_up_proj <-> q/k/v and gate/up.
#include "formats/fused_proj.h"

#include <cstring>
#include <vector>

#include "formats/error.h"

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
  if (f.parts[2]) return {int64_t(c.n_heads) * c.head_dim, int64_t(c.n_kv_heads) * c.head_dim,
                          int64_t(c.n_kv_heads) * c.head_dim};
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

void split_fused_projections(const ModelConfig& c, std::map<std::string, Tensor>& tensors,
                             const std::string& path) {
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
      std::vector<Tensor> parts;
      for (const char* name : f.parts) {
        if (!name) break;
        auto it = tensors.find(p + name);
        if (it == tensors.end()) user_error("{}: no tensor {}{} to fuse into {}", c.arch, p, name, f.fused);
        if (!is_float(it->second.dtype))
          user_error("{}{}: {} stores it fused ({}); quantized layouts of it are not written", p, name, c.arch, f.fused);
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

}  // namespace qt
