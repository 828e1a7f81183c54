// The mixture-of-experts FFN's device steps (moe.cu), between the router GEMM and the experts'
// GEMMs (GpuModel::Impl::moe_ffn): routing, the (token, expert) pairs grouped by expert, the
// gathered GEMM rows, and the weighted sum of the experts' outputs back into each token's row.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "libquant/cuda/ops.h"

namespace qt::cuda {

// Largest expert count and experts per token the routing kernels take (check_supported refuses more).
constexpr int kMoeMaxExperts = 1024;
constexpr int kMoeMaxTopK = 16;

// Per token of logits [n, E] (the router's fp32 output): its K experts sel [n, K] and weights
// w [n, K], and counts[e] += tokens routed to e (counts zeroed by the caller). As the CPU's
// LlamaModel::moe_ffn: p = softmax(logits) in fp32, the K largest (torch.topk: among equal values
// the lower index first), w = p or (renorm) p / Σ top-k p; topk_first (gpt_oss): the K largest
// logits, then softmax over those K.
void moe_route(const float* logits, int n, int E, int K, bool topk_first, bool renorm, int32_t* sel, float* w,
               int32_t* counts, cudaStream_t s);
// Each expert's segment starts at a multiple of kMoeRowAlign rows: the slices its GEMMs read and
// write are then 16·row-bytes aligned (256 bytes for rows of a multiple of 16 bytes), as the int8
// and FP8 tensor-core GEMMs want them; the rows between segments are never read.
constexpr int kMoeRowAlign = 16;
// offs [E + 1]: expert e's rows are offs[e] … offs[e] + counts[e] − 1, offs[e + 1] the next
// aligned row after them (offs[E]: the rows in use, at most n·K + (kMoeRowAlign − 1)·E).
void moe_offsets(const int32_t* counts, int E, int32_t* offs, cudaStream_t s);
// slot [n·K]: the row of pair (t, j) in expert sel[t·K + j]'s segment, tokens in ascending order
// within each segment (a stable counting sort: the same rows every run).
void moe_fill(const int32_t* sel, int nk, int E, const int32_t* offs, int32_t* slot, cudaStream_t s);
// xg [slot(t, j)] = x [t] (rows of row_bytes bytes: bf16 activations, 8-bit codes, a token's
// scale) for every pair.
void moe_gather(const void* x, int n, int K, size_t row_bytes, const int32_t* slot, void* xg, cudaStream_t s);
// y [r] += b [e] for every row r of expert e's segment (gpt_oss's expert biases; b [E, cols]),
// rows < rows_used (offs[E]); the rows between segments get some expert's bias, never read.
void moe_bias(float* y, int rows_used, int cols, const int32_t* offs, int E, const float* b, cudaStream_t s);
// Per token t: o = Σ_j w[t, j] · y[slot(t, j)] over its experts in ascending expert order (the
// CPU's order), then out[t] += o (accumulate, the residual add) or out[t] = o.
void moe_combine(const float* y, int n, int K, int H, const int32_t* sel, const float* w, const int32_t* slot,
                 float* out, bool accumulate, cudaStream_t s);

}  // namespace qt::cuda
