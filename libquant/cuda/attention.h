// Causal attention within chunks, from an f16 K/V cache: per (chunk, query head) the scores
// S = Q·Kᵀ (fp32, one batched cuBLAS GEMM over all chunks and heads, grouped-query heads reading
// their kv head), the causal softmax (attn_softmax.cu) into f16 P, then O = P·V (fp32, a second
// batched GEMM) written into the heads' columns of the output rows.
#pragma once
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include "libquant/cuda/buffer.h"
#include "libquant/cuda/kv.h"

namespace qt::cuda {

class Attention {
 public:
  Attention();
  ~Attention();
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;
  // Binds the buffers for up to max_chunks chunks of T tokens: q [B·T, nh·hd], k, v [B·T, nkv·hd]
  // (f16), out [B·T, nh·hd] (fp32). Allocates the score and probability scratch.
  // Quantized KV caches in decode mode (kv.h) also bind k2 (exact keys: a second score matrix)
  // and/or v2 (exact values: a second probability matrix, P2·V2 added to the output); the
  // softmax then reads S or S2 per (query, key) by the bounds given to run(). q2: the queries S2
  // uses (head space, where q is in a rotated key domain: exact keys are scored as q · k).
  void bind(int max_chunks, int T, int nh, int nkv, int hd, const __half* q, const __half* k, const __half* v,
            float* out, const __half* k2 = nullptr, const __half* v2 = nullptr, const __half* q2 = nullptr);
  // Runs the first `chunks` chunks (kb / vb: the key and value bounds of the bound k2 / v2).
  void run(int chunks, float scale, cudaStream_t s, KvBound kb = {}, KvBound vb = {});
  static size_t scratch_bytes(int chunks, int T, int nh, bool k2 = false, bool v2 = false) {
    return size_t(chunks) * nh * T * T * (4 * (1 + k2) + 2 * (1 + v2));
  }

 private:
  cublasHandle_t h_ = nullptr;
  int max_chunks_ = 0, T_ = 0, nh_ = 0, nkv_ = 0, hd_ = 0;
  bool k2_ = false, v2_ = false;
  DeviceBuffer S_, P_, S2_, P2_, ptrs_;  // ptrs_: 11 arrays of max_chunks·nh device pointers
};

}  // namespace qt::cuda
