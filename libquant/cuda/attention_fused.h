// Fused causal attention within chunks (FlashAttention-2's forward: Dao, "FlashAttention-2: Faster
// Attention with Better Parallelism and Work Partitioning", 2023, Algorithm 1): per block a tile of
// queries of one chunk and one head (or of a few heads that share a kv head); the key and value
// tiles stream through shared memory, the scores live in registers only (tensor-core MMA, fp32),
// the softmax runs online in fp32 and each output row is written once. No score or probability
// matrix touches global memory.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace qt::cuda {

// Head dims the fused kernel is built for (64, 128); others take the materialised path (attention.h).
bool fused_attention_fits(int hd);

// out [chunks·T, nh·hd] (fp32) = causal attention of q [chunks·T, nh·hd] over k, v [chunks·T,
// nkv·hd] (f16), each chunk a sequence of T from position 0; query head h reads kv head
// h / (nh / nkv). window > 0: each query sees its newest `window` keys only; softcap > 0: scores
// capped as softcap·tanh(score·scale / softcap) (causal_softmax's rule, ops.h). sinks: null, or one
// fp32 logit per query head (gpt_oss) that joins each row's max and denominator and carries no
// value — compared with the scaled (and capped) scores as they are.
// tile: the block's shape, 0 the default for hd; 1: 64 queries × 64-key tiles, 2: 128 × 64,
// 3: 128 × 32; hd 128 also 4: 4 query heads of one kv head × 64 positions (8 warps) and 5: 2 heads
// × 64 positions (4 warps), where nh / nkv is a multiple of 4 or 2 (else 2). Default at hd 128: 5
// where nh / nkv is even, else 2; at hd 64: 2. The timing test compares them.
// ld: the row stride of q, k and v (elements, a multiple of 8) where they are columns of one
// matrix (the W8A8 q|k|v GEMM's output, gemm_q8_fused.h); 0: each packed as above.
void fused_attention(const __half* q, const __half* k, const __half* v, float* out, int chunks, int T, int nh, int nkv,
                     int hd, float scale, cudaStream_t s, int window = 0, float softcap = 0,
                     const float* sinks = nullptr, int tile = 0, int ld = 0);

}  // namespace qt::cuda
