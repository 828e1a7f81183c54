// The per-layer, per-kv-head mean of the keys (after RoPE, as the cache stores them) over
// calibration text, for key centering (libquant/kv/key_center.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libquant/kv/cache.h"
#include "libquant/kv/key_center.h"
#include "libquant/model/llama.h"

namespace qt::calib {

// A full-precision cache that also sums every appended key per layer and kv head (calibration).
class KeyMeanRecorder final : public KVCache {
 public:
  explicit KeyMeanRecorder(const KVShape& s);
  void clear() override { inner_->clear(); }
  void append(int layer, const float* k, const float* v, int n, int first_pos) override;
  void attend(int layer, const float* q, int n_q, int first_pos, float* out) const override {
    inner_->attend(layer, q, n_q, first_pos, out);
  }
  std::string name() const override { return inner_->name(); }
  double bytes_per_token() const override { return inner_->bytes_per_token(); }
  int size(int layer) const override { return inner_->size(layer); }
  // The means so far, and the positions they average (per layer).
  kv::KeyCenter mean() const;
  int64_t tokens() const { return count_.empty() ? 0 : count_[0]; }

 private:
  std::unique_ptr<KVCache> inner_;
  std::vector<double> sum_;     // [layers][kv_heads][head_dim]
  std::vector<int64_t> count_;  // per layer
};

// Chunks of `ctx` tokens (the first `chunks` of them, each starting with bos_id when ≥ 0) run
// through the model with a full-precision cache; every key of every position is averaged.
kv::KeyCenter measure_key_mean(LlamaModel& model, const std::vector<int32_t>& tokens, int ctx, int chunks,
                               int32_t bos_id, int64_t* tokens_used);

}  // namespace qt::calib
