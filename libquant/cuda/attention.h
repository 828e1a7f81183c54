// Causal attention within chunks, from an f16 K/V cache: per (chunk, query head) the scores
// S = Q·Kᵀ (fp32, one batched cuBLAS GEMM over all chunks and heads, grouped-query heads reading
// their kv head), the causal softmax (attn_softmax.cu) into f16 P, then O = P·V (fp32, a second
// batched GEMM) written into the heads' columns of the output rows — the materialised path.
// The fused path (attention_fused.h: no score matrix in memory) runs instead where it can: the
// f16 cache, or a quantized cache's decoded f16 vectors without exact decode windows (k2 / v2:
// those mix two score matrices per row and stay materialised), head dims 64 and 128.
#pragma once
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "libquant/cuda/attention_fused.h"
#include "libquant/cuda/buffer.h"
#include "libquant/cuda/kv.h"

namespace qt::cuda {

class Attention {
 public:
  // fused false: always the materialised path (the A/B baseline of the fused kernel).
  explicit Attention(bool fused = true);
  ~Attention();
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;
  // Binds the buffers for up to max_chunks chunks of T tokens: q [B·T, nh·hd], k, v [B·T, nkv·hd]
  // (f16), out [B·T, nh·hd] (fp32). The materialised path allocates its score and probability
  // scratch here; the fused one none.
  // Quantized KV caches in decode mode (kv.h) also bind k2 (exact keys: a second score matrix)
  // and/or v2 (exact values: a second probability matrix, P2·V2 added to the output); the
  // softmax then reads S or S2 per (query, key) by the bounds given to run(). q2: the queries S2
  // uses (head space, where q is in a rotated key domain: exact keys are scored as q · k).
  // kb / vb: the key and value bounds of k2 / v2. ld: q, k and v as columns of one matrix with this
  // row stride (the W8A8 q|k|v GEMM's output; the fused path only), 0: packed as above.
  // Banded windows: every query t reads exact positions within [t − W + 1, t] only (W the
  // widest bound's width()), so where 2W < T the second GEMMs run over a band instead of T × T:
  // per block of W queries, the 2W keys from band_start (kv.h) — S2 and P2 are T × 2W per head,
  // not T × T, and the window costs O(T·W) instead of doubling the attention.
  void bind(int max_chunks, int T, int nh, int nkv, int hd, const __half* q, const __half* k, const __half* v,
            float* out, const __half* k2 = nullptr, const __half* v2 = nullptr, const __half* q2 = nullptr,
            KvBound kb = {}, KvBound vb = {}, int ld = 0);
  // Runs the first `chunks` chunks; window > 0: each query sees its newest `window` keys only
  // (sliding layers); softcap > 0: scores soft-capped before the softmax (causal_softmax, ops.h).
  // sinks: null, or one fp32 logit per query head (gpt_oss): joins each softmax's max and
  // denominator on both paths (f16 cache; attention_fused.h, causal_softmax).
  void run(int chunks, float scale, cudaStream_t s, int window = 0, float softcap = 0, const float* sinks = nullptr);
  // Whether bind's configuration runs fused (the rest: materialised).
  static bool runs_fused(bool fused, int hd, bool k2, bool v2) {
    return fused && !k2 && !v2 && fused_attention_fits(hd);
  }
  bool fused() const { return fused_now_; }
  // The band's block (0: the second GEMMs over whole T × T).
  static int band(int T, bool k2, bool v2, KvBound kb, KvBound vb) {
    const int w = std::max(k2 ? kb.width() : 0, v2 ? vb.width() : 0);
    return w > 0 && 2 * w < T ? w : 0;
  }
  int band() const { return band_; }
  // fused: runs_fused's answer for the configuration (no scratch at all).
  static size_t scratch_bytes(int chunks, int T, int nh, bool k2 = false, bool v2 = false, KvBound kb = {},
                              KvBound vb = {}, bool fused = false) {
    if (fused) return 0;
    const int b = band(T, k2, v2, kb, vb);
    const size_t tt = size_t(T) * T, t2 = b ? size_t(T) * 2 * b : tt;
    return size_t(chunks) * nh * (tt * 6 + t2 * (4 * k2 + 2 * v2));
  }

 private:
  cublasHandle_t h_ = nullptr;
  bool fused_ = true, fused_now_ = false;
  const __half *q_ = nullptr, *k_ = nullptr, *v_ = nullptr;  // the fused path's operands
  float* out_ = nullptr;
  int max_chunks_ = 0, T_ = 0, nh_ = 0, nkv_ = 0, hd_ = 0, ld_ = 0;
  bool k2_ = false, v2_ = false;
  KvBound kb_, vb_;
  int band_ = 0, nbf_ = 0, tail_ = 0;    // band block, whole blocks per chunk, rows of the last partial one
  DeviceBuffer S_, P_, S2_, P2_, ptrs_;  // ptrs_: 11 arrays of max_chunks·nh device pointers
  DeviceBuffer bptrs_;                   // band: 6 arrays of max_chunks·nh·nbf_, then 6 of max_chunks·nh (tail)
};

}  // namespace qt::cuda
