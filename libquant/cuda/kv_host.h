// The GPU cache's generic side (KvSideGpu::HostCodec, kv.h): any method of the CPU table run through
// its CPU codec (libquant/kv/codec_*.cpp), no CUDA re-implementation. Per layer the chunk's f16 K/V
// (after RoPE, as the GPU has them) come to pinned host memory; per (chunk, kv head) the positions
// below the cache's boundary are encoded exactly as the CPU cache encodes them (quant_cache.cpp: the
// same KVContext — seed, artifacts, ctx.layer, RoPE angles — positions from 0 in every chunk, the
// codec of kv head h via for_head(h)), decoded into the codec's domain and mapped back to *head
// space*, so attention on the GPU needs no domain logic:
//   values: v̂ = domain_to_head(decode(j));
//   keys:   the CPU scores ⟨query_to_domain(q), decode(j)⟩; query_to_domain is linear in every
//           codec (rotations, JL sketches, SpectralQuant's [Uq; ⟨q, μ⟩], VecInfer's H(q ⊙ λ)/√d),
//           so the score is q · k̂ with k̂[c] = ⟨query_to_domain(e_c), decode(j)⟩. VecInfer's
//           table scoring equals ⟨query_to_domain(q), decode(j)⟩ by the codec contract; CommVQ's
//           decode applies RoPE at the stored position, and its domain is head space.
// Both maps are one domain_dim × head_dim matrix per codec (per layer and kv head for the
// calibrated methods), built once from the basis vectors. The result is rounded to f16 as the
// native kinds' decoded domain is; positions at or after the boundary keep their exact values.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "libquant/kv/codec.h"
#include "libquant/kv/spec.h"

namespace qt::cuda {

class HostCodecs {
 public:
  // The codecs of `spec` for every layer (UserError as make_codec gives it: methods, bits,
  // parameters, missing calibration tables, CommVQ without the model's RoPE). rope_inv_freq: the
  // model's RoPE frequencies (head_dim / 2 of them; empty: unknown).
  HostCodecs(const kv::KVSpec& spec, bool key, const kv::KVConfig& cfg, int head_dim, int n_layers,
             std::vector<float> rope_inv_freq);
  int token_group() const { return codecs_[0]->token_group(); }
  size_t group_bytes() const { return codecs_[0]->group_bytes(); }
  // Chunks of T positions: RoPE angles for positions [0, T) (rebuilds the codecs when they need more).
  void reserve_positions(int T);
  // x [B·T, nkv·D] f16 bits → y, the same shape: positions < enc of every chunk and kv head the
  // head-space reconstruction of their codes, the rest x. Runs over (chunk, kv head) with OpenMP.
  void run(int layer, const uint16_t* x, int B, int T, int nkv, int enc, uint16_t* y) const;
  // The same for two sides at once (one parallel loop over both): either may be null.
  static void run_both(const HostCodecs* a, const uint16_t* xa, uint16_t* ya, const HostCodecs* b, const uint16_t* xb,
                       uint16_t* yb, int layer, int B, int T, int nkv, int enc_a, int enc_b);

 private:
  void build(int n_pos);
  // The task of chunk c, kv head h.
  void run_one(int layer, const uint16_t* x, int c, int h, int T, int nkv, int enc, uint16_t* y) const;
  // head = Mt · dom: Mt stored domain_dim × D (project_t's layout).
  const std::vector<float>& matrix(const kv::Codec& c) const;

  kv::KVSpec spec_;
  bool key_;
  kv::KVContext ctx_;  // head_dim, seed, artifacts (loaded once); layer and rope set per codec
  int n_layers_;
  std::vector<float> inv_freq_;
  int n_pos_ = 0;
  std::vector<std::unique_ptr<kv::Codec>> codecs_;               // one per layer (calibrated), else one for all
  mutable std::map<const kv::Codec*, std::vector<float>> mats_;  // filled per layer before its parallel loop
};

}  // namespace qt::cuda
