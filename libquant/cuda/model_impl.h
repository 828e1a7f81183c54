// GpuModel::Impl: the weights on the device and the forward of a batch of chunks.
#pragma once
#include <cuda_runtime.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "formats/model_config.h"
#include "libquant/cuda/affine.h"
#include "libquant/cuda/attention.h"
#include "libquant/cuda/backend.h"
#include "libquant/cuda/blockfp.h"
#include "libquant/cuda/buffer.h"
#include "libquant/cuda/gemm_lt.h"
#include "libquant/cuda/kv.h"
#include "libquant/cuda/ops.h"
#include "libquant/cuda/profile.h"

namespace qt::cuda {

struct GpuModel::Impl {
  struct Layer {
    // fp32 [H]: the pre-norms (empty where the family has none: OLMo 2) and the post-norms
    // (Gemma, OLMo 2; empty for llama): formats/arch.h's BlockNorms, 1 + w folded in for Gemma.
    DeviceBuffer attn_norm, ffn_norm, attn_post, ffn_post;
    DeviceBuffer q_norm, k_norm;  // fp32 [head_dim] or [n_heads·head_dim] / [n_kv·head_dim]
    DeviceBuffer bqkv;            // fp32 [Q + 2·KV]: q/k/v biases (qwen2); empty: none
    DeviceBuffer bo;              // fp32 [H]: o_proj's bias (gpt_oss); empty: none
    DeviceBuffer sinks;           // fp32 [n_heads]: gpt_oss's attention sink logits; empty: none
    int rope = 1;                 // 0 none (SmolLM3's no-RoPE layers), 1 the global table, 2 the local
    int window = 0;               // sliding-window layer: keys each query sees; 0: all
    DeviceBuffer wqkv;            // bf16 [Q + 2·KV, H]: q_proj, k_proj, v_proj rows
    DeviceBuffer wo;              // bf16 [H, Q]
    DeviceBuffer wgu;             // bf16 [2F, H]: gate_proj, up_proj rows
    DeviceBuffer wdown;           // bf16 [H, F]
    // A sparse layer (ModelConfig::is_moe_layer): the router, bf16 [E, H]; then wgu holds every
    // expert's gate and up rows, bf16 [E·2F', H] (expert e's at rows e·2F'), and wdown every
    // expert's down rows, bf16 [E·H, F'] (F' = moe_intermediate).
    DeviceBuffer router;
    // gpt_oss: the router's bias fp32 [E], the experts' gate|up biases [E, 2F'] (gate then up, as
    // wgu's rows) and down biases [E, H]; empty: none.
    DeviceBuffer brouter, bgu, bdown;
    // W8A8 (q8): the same matrices as int8 codes (fp8: E4M3 codes), and their per-output-channel
    // scales (fp32).
    DeviceBuffer sqkv, so, sgu, sdown;
    // Affine (weight-only): the same matrices as MLX codes, decoded to bf16 before each GEMM.
    AffineWeight aqkv, ao, agu, adown;
    // bitsandbytes NF4 / FP4 (weight-only): codes and absmax, decoded to bf16 before each GEMM.
    Bnb4Weight nqkv, no, ngu, ndown;
    // NVFP4 / MXFP4 / FP8_BLOCK (the Dequantized rows): codes and scales, decoded to bf16 before each GEMM.
    BlockFpWeight fqkv, fo, fgu, fdown;
  };

  ModelConfig cfg;
  const ArchDesc* desc = nullptr;  // the family's row (formats/arch.h)
  // A pipeline stage (pipeline.cpp) holds layers [first_layer, last_layer) on `device`: the first
  // stage the embedding, the last the final norm and the output head. One stage: all of them.
  int device = 0, first_layer = 0, last_layer = 0;
  bool has_embed() const { return first_layer == 0; }
  bool has_head() const { return last_layer == cfg.n_layers; }
  int Q = 0, KV = 0;
  float embed_mult = 1.0f;  // Gemma: √hidden
  DeviceBuffer embed;       // [vocab, H] as stored
  int embed_dtype = 0;      // 0 f32, 1 bf16, 2 f16
  DeviceBuffer lm_head;     // bf16 [vocab, H] (empty when it is `embed` itself: tied bf16)
  DeviceBuffer final_norm;  // fp32 [H]
  std::vector<Layer> layers;
  bool q8 = false;         // every projection W8A8 or FP8 (8-bit codes, per-token 8-bit activations)
  bool affine = false;     // every projection MLX affine (weight-only; bf16 GEMMs of decoded rows)
  void tune_gemms(int n);  // W8A8: cuBLASLt's int8 candidates timed at reserve
  // W8A8: epilogues fused into RoPE and the next norm (the same values as the separate kernels,
  // which run where the hidden row does not fit shared memory).
  bool q8_fuse = true;
  // W8A8 / W4A8 / FP8: the gate|up GEMM through CUTLASS with SwiGLU in its epilogue (gemm_q8_fused.h;
  // gate and up rows interleaved at load); use_q8_fused_gemms decides.
  bool q8_cutlass = false;
  // And the q|k|v GEMM with RoPE in its epilogue, writing q, k, v as f16 columns of one matrix in
  // qkv's bytes that the fused attention reads in place: where every layer is q8_plain_qkv and
  // the attention runs fused on the f16 cache (q8_rope_now: not with a quantized cache).
  bool q8_rope = false;
  bool q8_rope_now() const { return q8_rope && !kvq; }
  void use_q8_fused_gemms();
  bool w4 = false;       // q8 with int4 weights (W4A8), unpacked to int8 at load
  bool fp8 = false;      // q8 with E4M3 weights and activations (FP8_DYNAMIC), fp32 sums
  bool bnb4 = false;     // every projection bitsandbytes NF4 / FP4 (weight-only, as affine)
  bool blockfp = false;  // every projection NVFP4 / MXFP4 / FP8_BLOCK (decoded as affine)
  // blockfp: the rows that round each Linear's input (the _a4 rows, fp8_block); None: the others.
  ActRound act_round = ActRound::None;
  // fp8_block: the projections on the FP8 tensor cores (GemmLt::run_block_f8; model_blockfp.cpp)
  // unless fp8_decode (the bf16 decode everywhere: the tests' comparison; set before reserve).
  bool fp8_decode = false;
  bool fp8_lt() const { return act_round == ActRound::Fp8Groups && !fp8_decode && !cfg.is_moe(); }
  // fp8_lt: a GEMM input's E4M3 codes [N, max(H, Q, F)], their scales [max(H, Q, F)/128, N], and
  // an fp32 [N, H] output for an out projection whose accumulating GEMM cuBLASLt refuses.
  DeviceBuffer fq, fs, fy;
  std::string affine_desc;  // "affine4-g64", "nf4-b64", "nvfp4"
  DeviceBuffer wdec;        // affine: one decoded bf16 matrix (the largest stacked projection)
  size_t weight_bytes = 0;
  bool dense_ffn = false;  // some layer has a dense MLP (sizes gu, hb)

  cudaStream_t stream = nullptr;
  std::unique_ptr<GemmLt> gemm;
  std::unique_ptr<Attention> attn;
  bool fused_attention = true;  // false: the materialised attention everywhere (attention.h)
  std::unique_ptr<GpuKv> kvq;   // a quantized KV cache (kv.h); null: the f16 cache
  StageProfile prof;            // QT_CUDA_PROFILE=1

  // Scratch for up to max_chunks chunks of T tokens.
  int max_chunks = 0, T = 0;
  DeviceBuffer rope_cos, rope_sin;      // fp32 [T, hd/2]
  DeviceBuffer rope_cs;                 // q8_rope: the two interleaved (gemm_q8_fused.h rope_cos_sin)
  DeviceBuffer rope_cos_l, rope_sin_l;  // gemma3's sliding layers: the local base's table
  DeviceBuffer post;                    // fp32 [N, H]: a sublayer's output before its post-norm
  DeviceBuffer tok, x, xb, qkv, q, k, v, att, attb, gu, hb;
  // act_round: fp32 [N, max(H, F)], a GEMM's input before its rounding; nvfp4_a4: each token's
  // global scale [N], which the GEMM's output rows are divided by (blockfp.h)
  DeviceBuffer xr, xg;
  DeviceBuffer xq, sxa, sxb, acc;  // q8: int8 activations, their scales, the int32 GEMM output
  // MoE: router logits [N, E]; per (token, pick) the expert, weight and row in the expert-sorted
  // order [N·K]; counts and offsets [E | E + 1]; the gathered rows (bf16 [N·K, H]), the experts'
  // gate|up sums then down outputs (fp32, [N·K, max(2F', H)]), SwiGLU's rows (bf16 [N·K, F']).
  DeviceBuffer moe_logits, moe_sel, moe_w, moe_slot, moe_cnt, moe_xg, moe_y, moe_hb;
  std::vector<int32_t> moe_host;  // counts and offsets read back per layer
  // MoE with 8-bit weights: the gathered rows' codes [rows, max(H, F')] and per-token scales, the
  // GEMMs' sums [rows, max(2F', H)], SwiGLU's fp32 rows [rows, F'].
  DeviceBuffer moe_q, moe_qs, moe_acc, moe_hf;
  // Output head: normed rows, logits of up to head_rows rows, targets and NLL.
  int head_rows = 0;
  DeviceBuffer hs, logits, target, nll;
  // An int8 / int4 per-channel output head (a native W4A8/W8A8 folder's quantized tied embedding,
  // or a quantized lm_head): run as the CPU's IntLinear runs it — the final norm's rows quantized
  // per token (hq, hsx), the int8 GEMM into the logits buffer, the epilogue in place.
  bool head_q8 = false;
  DeviceBuffer head_codes, head_scales, hq, hsx;

  // Uploads layers [first, last) (and the embedding / head where they belong) to `device`,
  // releasing their tensors from ck (the last stage clears ck).
  Impl(Checkpoint& ck, bool fused_attention, int device, int first, int last);
  ~Impl();
  const bf16* head_weight() const { return lm_head.bytes() ? lm_head.get<bf16>() : embed.get<bf16>(); }
  // The KV cache's methods: f16 everywhere (kvq null) or a GpuKv; the next reserve re-binds.
  void set_kv(const kv::KVConfig& cfg);
  // Attention of the layer's q, k, v (after RoPE) into att, through kvq when set.
  void attend(int chunks, const Layer& L);
  // The GEMM input of a sublayer: x through its pre-norm into xb (bf16), or x as bf16 without one
  // (act_round: the fp32 rows, normed into xr, rounded into xb).
  // Returns the fp32 rows that are rounded (act_round; fp8_lt leaves the rounding to blockfp_proj),
  // else null.
  const float* pre_norm(const DeviceBuffer& w, int N);
  // fp8_lt: Y [N, out] (+)= the projection of the fp32 rows [N, in] as fp8_block multiplies it:
  // on the FP8 tensor cores (fp8_block_gemm), else rounded into rb (bf16) and the decoded weight's
  // bf16 GEMM. blockfp_out: the same for an out projection, into x (or through its post-norm).
  bool fp8_block_gemm(const BlockFpWeight& f, const float* rows, int in, int N, float* Y, bool accumulate);
  void blockfp_proj(const BlockFpWeight& f, const float* rows, bf16* rb, int out, int in, int N, float* Y,
                    bool accumulate);
  void blockfp_out(const BlockFpWeight& f, const float* rows, bf16* rb, int out, int in, int N,
                   const DeviceBuffer& post_w);
  // qkv (fp32, after the GEMM) into RoPE'd f16 q, k, v: biases, q/k norms, the layer's RoPE table.
  void qkv_to_heads(const Layer& L, int N);
  // A sparse layer's FFN on xb (the normed rows, moe_ffn.cpp), added to x (or through its post-norm).
  void moe_ffn(const Layer& L, int N);
  // The W8A8 / FP8 block's: a, sa the normed rows' codes and scales (xb their bf16 for the router).
  template <typename C, typename A>
  void moe_ffn_q8(const Layer& L, int N, const C* a, const float* sa);
  // Router GEMM (+ bias), routing, the pairs' rows; returns the host copy of counts | offsets.
  const int32_t* moe_route_rows(const Layer& L, int N);
  // Expert e's bf16 gate|up (down: false) matrix: its slice of wgu / wdown, or decoded into wdec.
  const bf16* expert_weight(const Layer& L, int e, bool gate_up);
  size_t moe_scratch_bytes(size_t N) const;
  void moe_reserve(size_t N);
  // y = A · Wᵀ added to x, or (post-norm) x += post_w · rmsnorm(A · Wᵀ); the rows of y divided by
  // row_divisor() first where there is one.
  float* row_divisor() const { return act_round == ActRound::Nvfp4 ? xg.get<float>() : nullptr; }
  void out_proj(const bf16* W, int out, int in, const bf16* A, int N, const DeviceBuffer& post_w);
  // Whether the W8A8 block runs a layer's q|k|v epilogue fused into RoPE (no bias, no q/k norm, RoPE).
  bool q8_plain_qkv(const Layer& L) const { return !L.bqkv.bytes() && !L.q_norm.bytes() && L.rope == 1; }
  // Sizes the scratch for `chunks` chunks of T tokens and `rows` output-head rows at once.
  void reserve(int chunks, int T, int rows);
  // Bytes reserve(chunks, T, rows) needs beyond the weights.
  size_t scratch_bytes(int chunks, int T, int rows) const;
  // Runs chunks × T tokens (host ids, row-major [chunks, T]), each chunk a fresh sequence from
  // position 0; leaves the last hidden states in x. The two halves: the embedding of device ids
  // into x, and the stage's layers on x.
  void forward(const int32_t* ids, int chunks);
  void embed_tokens(const int32_t* dev_ids, int chunks);
  void run_layers(int chunks);
  // prev: the layer before (its down GEMM's sums still in acc, added to x by this layer's first
  // norm when q8_fuse); last: add this layer's down output to x here.
  // (model_q8.cpp)
  // C, A: int8_t, int32_t (W8A8 / W4A8) or e4m3, float (FP8): the codes and the GEMM's sums.
  template <typename C, typename A>
  void forward_layer_q8(const Layer& L, int chunks, const Layer* prev, bool last);
  template <typename C, typename A>
  void gemm8(const DeviceBuffer& W, int out, int in, const C* X, int n, A* Y);
  // The q|k|v projection of the codes a (scales sa) to attention's q, k, v.
  template <typename C, typename A>
  void qkv_q8(const Layer& L, int N, const C* a, const float* sa);
  // The bf16 matrix of a projection: its own, or (affine, nf4, blockfp) its codes decoded into wdec.
  const bf16* weight(const DeviceBuffer& dense, const AffineWeight& a, const Bnb4Weight& n, const BlockFpWeight& f);
  // The final norm of rows first … first+n−1 of every chunk into hs ([chunks·n, H], bf16).
  void final_norm_rows(int chunks, int first, int n);
  // Logits of hs rows [r0, r0 + rows) into `logits` (rows ≤ head_rows).
  void head(int r0, int rows);
  // Gemma 2's final-logit soft-cap on the first `rows` rows of `logits` (none where it has none).
  void final_softcap(int rows);
};

// Rows of logits held at once: at most 2 GiB of them.
int head_rows_for(const ModelConfig& c, int rows);
// The several-device side of make_scorer (pipeline.cpp).
std::unique_ptr<ChunkScorer> make_pipeline_scorer(GpuModel& m, int batch);

// UserError for an id outside 0 … vocab − 1 (before it indexes the embedding on the device).
void check_token_ids(const int32_t* ids, int64_t n, int vocab);

}  // namespace qt::cuda
