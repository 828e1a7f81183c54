#include "libquant/kv/key_center.h"

#include <filesystem>

#include "formats/error.h"
#include "formats/safetensors.h"
#include "libquant/kv/cache.h"

#include <fmt/ranges.h>

namespace qt::kv {
namespace {

class KeyCenteredCache final : public KVCache {
 public:
  KeyCenteredCache(std::unique_ptr<KVCache> inner, std::shared_ptr<const KeyCenter> c)
      : KVCache(inner->shape()), inner_(std::move(inner)), c_(std::move(c)) {}
  void clear() override { inner_->clear(); }
  void append(int layer, const float* k, const float* v, int n, int first_pos) override {
    const int H = shape_.n_kv_heads, D = shape_.head_dim;
    thread_local std::vector<float> kc;
    kc.resize(size_t(n) * H * D);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < H; ++h) {
        const size_t o = (size_t(t) * H + h) * D;
        const float* m = c_->at(layer, h);
        for (int d = 0; d < D; ++d) kc[o + d] = k[o + d] - m[d];
      }
    inner_->append(layer, kc.data(), v, n, first_pos);
  }
  void attend(int layer, const float* q, int n_q, int first_pos, float* out) const override {
    inner_->attend(layer, q, n_q, first_pos, out);
  }
  std::string name() const override { return inner_->name() + "+key-center"; }
  // The means are one vector per layer and head, shared by all positions: not per-token storage.
  double bytes_per_token() const override { return inner_->bytes_per_token(); }
  int size(int layer) const override { return inner_->size(layer); }

 private:
  std::unique_ptr<KVCache> inner_;
  std::shared_ptr<const KeyCenter> c_;
};

}  // namespace

std::unique_ptr<KVCache> make_key_centered_cache(std::unique_ptr<KVCache> inner, std::shared_ptr<const KeyCenter> c) {
  const KVShape& s = inner->shape();
  if (!c || c->layers != s.n_layers || c->kv_heads != s.n_kv_heads || c->head_dim != s.head_dim)
    user_error("key centering: means for another shape of model");
  return std::make_unique<KeyCenteredCache>(std::move(inner), std::move(c));
}

std::shared_ptr<const KeyCenter> load_key_center(const std::string& path, const KVShape& shape) {
  if (!std::filesystem::is_regular_file(path)) user_error("--kv-key-center {}: no such file", path);
  SafetensorsFile f;
  try {
    f = SafetensorsFile::open(path);
  } catch (const UserError& e) {
    user_error("--kv-key-center {}: not a key-mean file ({})", path, e.what());
  }
  auto it = f.metadata().find("format");
  if (it == f.metadata().end() || it->second != "quanttool-key-mean" || !f.has("key_mean"))
    user_error("--kv-key-center {}: not a key-mean file (made by calibrate --method key-mean?)", path);
  const Tensor& t = f.get("key_mean");
  if (t.shape.size() != 3 || t.shape[0] != shape.n_layers || t.shape[1] != shape.n_kv_heads ||
      t.shape[2] != shape.head_dim)
    user_error("--kv-key-center {}: means of shape [{}], the model has {} layers, {} kv heads, head dim {}", path,
               fmt::join(t.shape, ", "), shape.n_layers, shape.n_kv_heads, shape.head_dim);
  auto c = std::make_shared<KeyCenter>();
  c->layers = shape.n_layers;
  c->kv_heads = shape.n_kv_heads;
  c->head_dim = shape.head_dim;
  c->mean = to_f32(t);
  return c;
}

void save_key_center(const std::string& path, const KeyCenter& c, int64_t tokens, const std::string& text) {
  write_safetensors(path, {{"key_mean", Tensor::from_f32(c.mean, {c.layers, c.kv_heads, c.head_dim})}},
                    {{"format", "quanttool-key-mean"},
                     {"layers", std::to_string(c.layers)},
                     {"kv_heads", std::to_string(c.kv_heads)},
                     {"head_dim", std::to_string(c.head_dim)},
                     {"tokens", std::to_string(tokens)},
                     {"text", text}});
}

}  // namespace qt::kv
