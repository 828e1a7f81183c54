// Causal attention within chunks, from an f16 K/V cache: per (chunk, query head) the scores
// S = Q·Kᵀ (fp32, one batched cuBLAS GEMM over all chunks and heads, grouped-query heads reading
// their kv head), the causal softmax (attn_softmax.cu) into f16 P, then O = P·V (fp32, a second
// batched GEMM) written into the heads' columns of the output rows.
#pragma once
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include "libquant/cuda/buffer.h"

namespace qt::cuda {

class Attention {
 public:
  Attention();
  ~Attention();
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;
  // Binds the buffers for up to max_chunks chunks of T tokens: q [B·T, nh·hd], k, v [B·T, nkv·hd]
  // (f16), out [B·T, nh·hd] (fp32). Allocates the score and probability scratch.
  void bind(int max_chunks, int T, int nh, int nkv, int hd, const __half* q, const __half* k, const __half* v,
            float* out);
  // Runs the first `chunks` chunks.
  void run(int chunks, float scale, cudaStream_t s);
  static size_t scratch_bytes(int chunks, int T, int nh) { return size_t(chunks) * nh * T * T * (4 + 2); }

 private:
  cublasHandle_t h_ = nullptr;
  int max_chunks_ = 0, T_ = 0, nh_ = 0, nkv_ = 0, hd_ = 0;
  DeviceBuffer S_, P_, ptrs_;  // ptrs_: 6 arrays of max_chunks·nh device pointers
};

}  // namespace qt::cuda
