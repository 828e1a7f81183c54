// Calibrated KV methods (VecInfer, SpectralQuant): their tables — codebooks, smoothing factors,
// eigenvector rotations — are trained on calibration text per layer, side and kv head by
// `quanttool calibrate --method kv-codebook` (calib/kv_codebook.h) and read from the artifacts
// folder (`--artifacts DIR`, artifacts.h) under names
//   "<method>_b<bits>.l<layer>.<k|v>.h<head>.<table>"      e.g. "vecinfer_b2.l5.k.h0.codebooks"
// so one folder holds the tables of several methods and bit widths beside `precompute`'s.
#pragma once
#include <string>
#include <vector>

#include "libquant/kv/codec.h"

namespace qt::kv {

std::string calibrated_prefix(const std::string& method, double bits);
std::string calibrated_name(const std::string& prefix, int layer, Side side, int head, const std::string& table);

// What a calibrated codec reads for ctx.layer: the tables of every kv head present.
class CalibratedTables {
 public:
  // UserError (naming the calibrate command) when the artifacts hold no tables for this method,
  // bits, layer and side.
  CalibratedTables(const KVContext& ctx, const std::string& method, double bits, Side side);
  int heads() const { return heads_; }
  // The table of kv head h; UserError when missing or not `size` floats (size < 0: any).
  const std::vector<float>& get(int h, const std::string& table, long size = -1) const;
  const std::vector<float>* find(int h, const std::string& table) const;

 private:
  const KVContext& ctx_;
  std::string prefix_, what_;
  Side side_;
  int heads_ = 0;
};

// A codec per kv head behind one: for_head(h) picks head h's; the rest answers as head 0 (all
// heads share sizes and domains).
class PerHeadCodec final : public Codec {
 public:
  explicit PerHeadCodec(std::vector<std::unique_ptr<Codec>> heads);
  const Codec& for_head(int h) const override { return *heads_.at(size_t(h)); }
  int domain_dim() const override { return heads_[0]->domain_dim(); }
  int token_group() const override { return heads_[0]->token_group(); }
  size_t group_bytes() const override { return heads_[0]->group_bytes(); }
  void encode(const float* x, int64_t stride, uint8_t* out) const override { heads_[0]->encode(x, stride, out); }
  void encode_at(const float* x, int64_t stride, int64_t pos, uint8_t* out) const override {
    heads_[0]->encode_at(x, stride, pos, out);
  }
  void encode_tokens_at(const float* x, int n, int64_t pos0, uint8_t* out) const override {
    heads_[0]->encode_tokens_at(x, n, pos0, out);
  }
  void decode(const uint8_t* codes, int64_t j0, int n, float* out) const override {
    heads_[0]->decode(codes, j0, n, out);
  }
  void query_to_domain(const float* q, float* out) const override { heads_[0]->query_to_domain(q, out); }
  void queries_to_domain(const float* q, int n, float* out) const override { heads_[0]->queries_to_domain(q, n, out); }
  void domain_to_head(const float* acc, float* out) const override { heads_[0]->domain_to_head(acc, out); }
  int table_dim() const override { return heads_[0]->table_dim(); }
  int table_min_keys() const override { return heads_[0]->table_min_keys(); }
  void query_table(const float* qd, float* t) const override { heads_[0]->query_table(qd, t); }
  void score_codes(const float* t, const uint8_t* c, int64_t j0, int n, float* out) const override {
    heads_[0]->score_codes(t, c, j0, n, out);
  }

 private:
  std::vector<std::unique_ptr<Codec>> heads_;
};

}  // namespace qt::kv
