// Quantized KV caches on the GPU (eval-ppl --device cuda --kv / --kv-k / --kv-v, --kv-mode).
// Native kinds: f16, affine (plain per-token groups), kivi (keys per channel over groups of
// tokens, values per token) and turboquant_mse (WHT rotation, the f_d Lloyd–Max codebooks,
// fractional rates), CUDA kernels mirroring the CPU codecs (libquant/kv/codec_affine.cpp,
// codec_turboquant.cpp). Every other method of the CPU table (and the parameters the native
// kernels lack: rot= on affine, turboquant_mse rot=dense) is the HostCodec kind: the CPU codec on
// host copies of the layer's K/V, the reconstruction back in head space (kv_host.h). Both follow
// the quantized cache's visibility rules (libquant/kv/quant_cache.cpp).
//
// Per layer, after RoPE (the chunk's K/V as f16, as the CPU rounds them on the way in):
//   1. encode: positions [0, boundary(T)) of every chunk and kv head into the CPU's byte layout
//      (the same codes, byte for byte: per chunk and kv head the CPU's code array of one
//      sequence, groups back to back);
//   2. decode the codes into the method's *domain* (head space for affine / kivi, the rotated
//      space for turboquant_mse) as f16, with the positions after the boundary (the
//      full-precision window) written as their exact values in that domain;
//   3. queries into the key domain (turboquant: Π q), scores and P·V from the domain buffers
//      (Attention, cuBLAS), and the output back to head space once per query (Πᵀ, values).
// cache mode: every query of a chunk sees the state after the whole chunk was appended, so one
// merged buffer per side serves all of them. decode mode: the query at t sees boundary(t + 1);
// where that differs from the chunk's (a residual window, kivi's token groups), the scores of
// the exact keys and the values' exact window go through a second pair of GEMMs and the softmax
// picks per (query, key) which one it reads (window_softmax).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "libquant/cuda/buffer.h"
#include "libquant/kv/spec.h"

namespace qt::cuda {

class HostCodecs;  // kv_host.h

// Where a side's encoded positions end after n tokens (quant_cache.cpp's SideStore::boundary):
// kind 0 exact (nothing encoded), 1 per token (n − R), 2 groups (⌊n / U⌋ · U).
struct KvBound {
  int kind = 0, R = 0, U = 1;
  __host__ __device__ int64_t at(int64_t n) const {
    if (kind == 0) return 0;
    if (kind == 1) return n > R ? n - R : 0;
    return n / U * U;
  }
  // Every query t reads its full-precision positions within [t − width() + 1, t].
  __host__ __device__ int width() const { return kind == 1 ? R : kind == 2 ? U : 0; }
};

struct KvSideGpu {
  enum Kind { Exact = 0, Affine = 1, KiviKey = 2, TurboMse = 3, HostCodec = 4 };
  int kind = Exact;
  int D = 0;
  int bits = 0, group = 0;       // affine / kivi: code bits, channels per group (kivi keys: tokens per group)
  int n_hi = 0, bh = 0, bl = 0;  // turboquant_mse: the first n_hi rotated coordinates at bh bits, the rest at bl
  int R = 0, G = 1;              // residual window, tokens per code group
  size_t code_bytes = 0, group_bytes = 0;
  DeviceBuffer c_lo, t_lo, c_hi, t_hi, signs;  // fp32 codebooks (centroids, thresholds) and the WHT signs
  int nt_lo = 0, nt_hi = 0;
  std::string spec;                  // the CPU's canonical text
  std::shared_ptr<HostCodecs> host;  // HostCodec: the CPU codecs of every layer
  bool rotated() const { return kind == TurboMse; }
  KvBound bound() const;
  // Groups of one chunk's kv head (T positions) the code array holds.
  int64_t groups(int T) const { return (T + G - 1) / G; }
  // Decode mode reads positions after boundary(t + 1) at full precision for some query t.
  bool windowed() const { return kind != Exact && (G > 1 || R > 0); }
};

// The GPU side of `spec` (as make_codec reads it, with the cache's residual rule): a native kind
// where kv.cu's kernels run the method at these parameters, else HostCodec (codecs for n_layers
// layers; rope_inv_freq: the model's RoPE, for CommVQ); UserError "… not on cuda yet" for what
// neither runs (f32).
KvSideGpu make_kv_side(const kv::KVSpec& spec, bool key, const kv::KVConfig& cfg, int head_dim, int n_layers = 1,
                       const std::vector<float>& rope_inv_freq = {});

// Native kinds only (HostCodec: kv_host.h).
// x [B·T, nkv·D] f16 → codes [B][nkv][groups(T)][group_bytes] of positions < bound().at(T).
void kv_encode(const KvSideGpu& s, const __half* x, int B, int T, int nkv, uint8_t* codes, cudaStream_t st);
// dom [B·T, nkv·D] f16: positions < bound().at(T) decoded from the codes, the rest x in the domain.
void kv_decode(const KvSideGpu& s, const uint8_t* codes, const __half* x, int B, int T, int nkv, __half* dom,
               cudaStream_t st);
// y = Π x for rows × heads vectors of D (f16 → f16; turboquant's rotation).
void kv_rotate(const KvSideGpu& s, const __half* x, int64_t vectors, __half* y, cudaStream_t st);
// y = Πᵀ y in place, fp32 vectors of D.
void kv_unrotate(const KvSideGpu& s, float* y, int64_t vectors, cudaStream_t st);
// decode mode: per query row r (position r % T) the causal softmax over keys j ≤ t of
// (j < kb.at(t + 1) || !Se ? Sq : Se), written into Pq where j < vb.at(t + 1) (or everywhere
// when Pe is null) and into Pe elsewhere; zeros after t.
// band > 0: Se and Pe hold only a band of 2·band keys per row (attention.h's band layout: the
// query block b = t / band reads keys [band_start(b), band_start(b) + 2·band)).
void window_softmax(const float* Sq, const float* Se, int64_t rows, int T, float scale, KvBound kb, KvBound vb,
                    __half* Pq, __half* Pe, int band, cudaStream_t st);
// The first key of query block b's band (blocks of `band` queries, bands of 2·band keys, T ≥ 2·band).
__host__ __device__ inline int band_start(int b, int band, int T) {
  const int s = (b - 1) * band;
  return s < 0 ? 0 : s > T - 2 * band ? T - 2 * band : s;
}

// The cache of one eval-ppl run: one method for keys and one for values on every layer.
class GpuKv {
 public:
  // rope_inv_freq: the model's RoPE frequencies (CommVQ's keys are stored before RoPE).
  GpuKv(const kv::KVConfig& cfg, int head_dim, const std::vector<float>& rope_inv_freq = {});
  const KvSideGpu& keys() const { return k_; }
  const KvSideGpu& values() const { return v_; }
  bool decode_mode() const { return decode_; }
  // Second GEMMs in decode mode: scores of exact keys, P·V of the exact value window.
  bool key_window() const { return decode_ && k_.windowed(); }
  bool value_window() const { return decode_ && v_.windowed(); }
  // Sizes the buffers for `chunks` chunks of T tokens.
  void reserve(int chunks, int T, int nh, int nkv);
  static size_t scratch_bytes(const kv::KVConfig& cfg, int head_dim, int chunks, int T, int nh, int nkv);
  // What attention reads, given the forward's q, k, v (f16): the key-domain queries, the domain
  // keys and values, and (decode windows) the exact keys / values in their domains.
  const __half* q_ptr(const __half* q) const { return k_.rotated() ? qd_.get<__half>() : q; }
  const __half* k_ptr(const __half* k) const { return k_.kind == KvSideGpu::Exact ? k : kd_.get<__half>(); }
  const __half* v_ptr(const __half* v) const { return v_.kind == KvSideGpu::Exact ? v : vd_.get<__half>(); }
  // The exact keys of a decode window are scored in head space, as the CPU scores them: q · k.
  const __half* k2_ptr(const __half* k) const { return k; }
  const __half* v2_ptr(const __half* v) const { return v_.rotated() ? ve_.get<__half>() : v; }
  // Encodes and decodes layer `layer`'s K/V of `chunks` chunks (after RoPE), rotates the queries.
  // HostCodec sides copy K/V to the host and wait for the copy (the stream is synchronized).
  void prepare(const __half* q, const __half* k, const __half* v, int chunks, cudaStream_t st, int layer = 0);
  // After attention: the output (fp32 [chunks·T, nh·D], value domain) back to head space.
  void finish(float* out, int chunks, cudaStream_t st);
  // The codes of the last prepare (tests).
  const DeviceBuffer& key_codes() const { return ck_; }
  const DeviceBuffer& value_codes() const { return cv_; }

 private:
  KvSideGpu k_, v_;
  bool decode_ = false;
  int chunks_ = 0, T_ = 0, nh_ = 0, nkv_ = 0;
  DeviceBuffer ck_, cv_, kd_, vd_, qd_, ve_;
  PinnedBuffer hk_in_, hk_out_, hv_in_, hv_out_;  // HostCodec sides: K/V down, head-space reconstruction up
};

}  // namespace qt::cuda
