// The elementwise and reduction kernels of the GPU forward (one .cu file each), as host
// launchers on a stream. Activations: fp32 residual stream, bf16 GEMM inputs, f16 q/k/v.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qt::cuda {

using bf16 = __nv_bfloat16;

// embed.cu: x[r] = table[tok[r]] as fp32 (times `scale` where it is not 1: Gemma's √hidden);
// table_dtype 0 f32, 1 bf16, 2 f16.
void embed(const int32_t* tok, int n, const void* table, int table_dtype, int H, float* x, cudaStream_t s,
           float scale = 1.0f);

// rmsnorm.cu: y[r] = w · x[src(r)] / sqrt(mean(x[src(r)]²) + eps) as bf16, for r < rows, where
// src(r) = (r / group)·group_stride + group_off + r % group (group = rows, stride 0, off 0: every
// row in place; the output head's scored rows of each chunk otherwise).
void rmsnorm(const float* x, const float* w, bf16* y, int rows, int dim, float eps, int group, int group_stride,
             int group_off, cudaStream_t s);
// The same, every row in place, as fp32 (rows that are rounded before their GEMM, blockfp.h).
void rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps, cudaStream_t s);

// rope.cu: qkv [n, (nh + 2·nkv)·hd] fp32 → q [n, nh·hd], k, v [n, nkv·hd] f16, RoPE (rotate-half)
// on q and k at position r % T from the tables cos/sin [T, hd/2]; cos null: no RoPE (the layer
// applies none, SmolLM3), q and k only split and rounded.
void rope_split(const float* qkv, int n, int T, int nh, int nkv, int hd, const float* cos, const float* sin, __half* q,
                __half* k, __half* v, cudaStream_t s);

// swiglu.cu: h [n, F] = silu(gu[:, :F]) · gu[:, F:] as bf16; gelu_tanh: Gemma's GeGLU,
// gelu(gu[:, :F], approximate="tanh") · gu[:, F:] instead.
void swiglu(const float* gu, int n, int F, bf16* h, cudaStream_t s, bool gelu_tanh = false);
// swiglu.cu: a mixture-of-experts FFN's activation over gu [n, 2F] into hb (bf16) or, where hf is
// set, hf (fp32): SiLU(g)·u, or (clamped, gpt_oss) (clamp(u, ±limit) + 1) · min(g, limit) ·
// sigmoid(alpha · min(g, limit)).
void expert_act(const float* gu, int n, int F, bf16* hb, float* hf, bool clamped, float alpha, float limit,
                cudaStream_t s);
// The same as fp32 (rows that are rounded before the down GEMM, blockfp.h).
void swiglu(const float* gu, int n, int F, float* h, cudaStream_t s, bool gelu_tanh = false);

// variants.cu, the pieces of some families' blocks (formats/arch.h), fp32 in place:
// y [rows, cols] += b (q/k/v biases);
void add_bias(float* y, const float* b, int rows, int cols, cudaStream_t s);
// RMSNorm of q and k inside the q|k|v rows (stride floats apart): nq segments of qlen values from
// column 0 with weights wq, nk segments of klen from column kcol with wk (per head: segments are
// heads; whole: one segment each);
void qk_norm(float* qkv, int rows, int64_t stride, int nq, int qlen, const float* wq, int nk, int klen, int kcol,
             const float* wk, float eps, cudaStream_t s);
// x [rows, dim] += w · rmsnorm(y) (a post-norm before the residual add);
void post_norm_add(const float* y, const float* w, float* x, int rows, int dim, float eps, cudaStream_t s);
// x = cap · tanh(x / cap) over n values (the final-logit soft-cap).
void softcap(float* x, int64_t n, float cap, cudaStream_t s);

// convert.cu: y = bf16(x) over n values.
void to_bf16(const float* x, size_t n, bf16* y, cudaStream_t s);
// convert.cu: n_words pseudo-random 32-bit words (a hash of the index and seed) & mask.
void fill_random(uint32_t* p, size_t n_words, uint32_t seed, uint32_t mask, cudaStream_t s);

// attn_softmax.cu: rows of T scores (row r is query position p = r % T): P = softmax(scale · S) over
// keys 0 … p, zero after, as f16. window > 0: over keys p − window + 1 … p only (sliding layers);
// softcap > 0: each scaled score s becomes softcap · tanh(s / softcap) first (Gemma 2).
// sinks [nh] (gpt_oss; rows ordered (chunk, head, query)): head h's logit joins the max and the
// denominator of its rows' softmax, without a value.
void causal_softmax(const float* S, int64_t rows, int T, float scale, __half* P, cudaStream_t s, int window = 0,
                    float softcap = 0, const float* sinks = nullptr, int nh = 0);

// kld.cu: per row of base and test logits (kld.h's KldToken; same_top as 0/1).
struct KldRow {
  double nll, nll_base, kld, same_top;
};
void kld_rows(const float* base, const float* test, int rows, int V, const int32_t* target, KldRow* out,
              cudaStream_t s);

// nll.cu: nll[r] = log Σ_v exp(logits[r, v]) − logits[r, target[r]] (double).
void token_nll(const float* logits, int rows, int V, const int32_t* target, double* nll, cudaStream_t s);

}  // namespace qt::cuda
