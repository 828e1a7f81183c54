#include "calib/key_mean.h"

#include <algorithm>

#include "formats/error.h"

namespace qt::calib {

KeyMeanRecorder::KeyMeanRecorder(const KVShape& s)
    : KVCache(s),
      inner_(make_f32_kv_cache(s)),
      sum_(size_t(s.n_layers) * s.n_kv_heads * s.head_dim, 0.0),
      count_(size_t(s.n_layers), 0) {}

void KeyMeanRecorder::append(int layer, const float* k, const float* v, int n, int first_pos) {
  inner_->append(layer, k, v, n, first_pos);  // checks the layer and positions first
  const size_t HD = size_t(shape_.n_kv_heads) * shape_.head_dim;
  double* s = sum_.data() + size_t(layer) * HD;
  for (int t = 0; t < n; ++t)
    for (size_t i = 0; i < HD; ++i) s[i] += k[size_t(t) * HD + i];
  count_[size_t(layer)] += n;
}

kv::KeyCenter KeyMeanRecorder::mean() const {
  kv::KeyCenter c;
  c.layers = shape_.n_layers;
  c.kv_heads = shape_.n_kv_heads;
  c.head_dim = shape_.head_dim;
  c.mean.resize(sum_.size());
  const size_t HD = size_t(c.kv_heads) * c.head_dim;
  for (size_t i = 0; i < sum_.size(); ++i) {
    const int64_t n = count_[i / HD];
    c.mean[i] = n > 0 ? float(sum_[i] / double(n)) : 0.0f;
  }
  return c;
}

kv::KeyCenter measure_key_mean(LlamaModel& model, const std::vector<int32_t>& tokens, int ctx, int chunks,
                               int32_t bos_id, int64_t* tokens_used) {
  const int n = int(std::min<int64_t>(chunks, int64_t(tokens.size()) / ctx));
  if (n <= 0) user_error("calibrate: the text has fewer than {} tokens, one chunk", ctx);
  KeyMeanRecorder rec(model.kv_shape(ctx));
  std::vector<int32_t> chunk(static_cast<size_t>(ctx));
  for (int ci = 0; ci < n; ++ci) {
    rec.clear();
    std::copy(tokens.begin() + int64_t(ci) * ctx, tokens.begin() + int64_t(ci + 1) * ctx, chunk.begin());
    if (bos_id >= 0) chunk[0] = bos_id;
    model.forward_hidden(chunk.data(), ctx, 0, rec);
  }
  if (tokens_used) *tokens_used = rec.tokens();
  return rec.mean();
}

}  // namespace qt::calib
