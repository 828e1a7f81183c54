// Reconstruction metrics of a quantized KV cache beside PPL (`eval-ppl --kv-stats`): the quality
// measures KV-quantization libraries such as VeloxQuant-MLX report (cosine similarity), per layer,
// so their tables compare with ours.
//
//   keys / values  cos  — mean over encoded vectors of cos(x, x̂)
//                  rel MSE — Σ‖x − x̂‖² / Σ‖x‖² over encoded vectors
//     x: the vector the codec was given (fp16-rounded, minus the key means with --kv-key-center),
//     x̂: its reconstruction (Codec::reconstruct); vectors still in a full-precision window are
//     not counted (they are exact).
//   scores  rel err — sqrt(Σ (ŝ − s)² / Σ s²) over every (query, encoded key) pair, s = q·k
//           (exact) and ŝ = the score attention computed from the codes;
//           attn TV — mean over queries of ½ Σ_j |p̂_j − p_j|, the total-variation distance
//           between the attention weights from the cache and from the exact keys (windows
//           included, as attention sees them).
// The cache keeps an exact copy of the keys for the score columns while stats are on (memory
// and time of an fp32 cache besides the codes): a diagnostic mode, not for speed runs.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qt::kv {

struct KVLayerStats {
  double cos_sum[2] = {0, 0}, err2[2] = {0, 0}, norm2[2] = {0, 0};  // [keys, values]
  int64_t vectors[2] = {0, 0};
  double score_err2 = 0, score_ref2 = 0, tv_sum = 0;
  int64_t scores = 0, queries = 0;
  void add(const KVLayerStats& o);
};

class KVStats {
 public:
  explicit KVStats(int n_layers) : layers_(n_layers) {}
  void add(int layer, const KVLayerStats& s);
  int n_layers() const { return int(layers_.size()); }
  KVLayerStats layer(int l) const;
  KVLayerStats total() const;
  bool empty() const;
  // The per-layer table (and an "all" row) for stdout, and the same numbers as JSON.
  std::string table() const;
  nlohmann::json to_json() const;

 private:
  mutable std::mutex mu_;
  std::vector<KVLayerStats> layers_;
};

}  // namespace qt::kv
