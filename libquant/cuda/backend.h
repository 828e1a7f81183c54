// The CUDA backend's public face (compiled in every build; no CUDA header here).
//
// With -DQT_CUDA=ON the functions below run on the GPU (libquant/cuda/*.cu, *.cpp); without it,
// stub.cpp answers device_count() 0 and every other call is a UserError saying the build has no
// CUDA. What runs on the GPU (eval-ppl --device cuda, logits --device cuda): the decoder block of
// every arch row (formats/arch.h, as the CPU's LlamaModel reads it) with dense weights held as bf16 (cuBLASLt, fp32 accumulate) or W8A8 int8
// per channel (int8 tensor cores, int32 accumulate, per-token int8 activations; W4A8's int4 codes
// unpacked to int8 at load), MLX affine, NF4/FP4, NVFP4, MXFP4 and FP8_BLOCK (decoded to bf16 per GEMM; the
// rows with quantized activations round each GEMM's input as the CPU does), an f16
// or quantized (kv.h: affine, kivi, turboquant_mse) KV cache with causal attention inside the chunk, RMSNorm, RoPE, SwiGLU,
// the mixture-of-experts FFN of qwen3_moe and mixtral (bf16; moe_ffn.cpp), residuals, the output head and
// the per-token NLL (log-softmax) — only the forward pass; loading, tokenizing, chunking and the
// result's accumulation and JSON are the CPU path's own (perplexity.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "libquant/eval/perplexity.h"

namespace qt {
struct PackedTensor;
struct Scheme;
}  // namespace qt

namespace qt::cuda {

bool built();        // true in a -DQT_CUDA=ON build
int device_count();  // 0 without CUDA, without a device or driver

struct DeviceInfo {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int driver = 0;    // cudaDriverGetVersion, e.g. 13000
  int runtime = 0;   // cudaRuntimeGetVersion
  int cc_major = 0, cc_minor = 0;
  size_t memory = 0;             // bytes
  std::string describe() const;  // one line
};
// UserError when the build has no CUDA or no device is present.
DeviceInfo device_info(int device = 0);

// UserError "... not on cuda yet" for a configuration the GPU forward does not run (weights of a
// scheme it has no kernels for, a mix of dense and quantized projections, W8A8 with post-norms or
// GeGLU, gpt_oss, a mixture-of-experts folder with quantized weights).
void check_supported(const Checkpoint& ck);

// The model on the GPU. The constructor uploads every weight (bf16 for the projections and the
// output head, the embedding table as stored, norms fp32) and releases ck's tensors as it goes.
// fused_attention false: attention materialises its scores everywhere (the fused kernel's A/B
// baseline; by default the fused kernel runs where it applies, libquant/cuda/attention.h).
// devices: one (the whole model there) or several: the layers split into pipeline stages, one a
// device in order (pipeline.cpp; a device may repeat), the first holding the embedding, the last
// the output head; make_scorer then pipelines chunks through them.
class GpuModel {
 public:
  explicit GpuModel(Checkpoint&& ck, bool fused_attention = true, const std::vector<int>& devices = {0});
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;
  const ModelConfig& config() const;
  size_t weight_bytes() const;  // device bytes of the weights (every stage's)
  std::string kind() const;     // "bf16" (dense) or "w8a8" (int8 tensor cores)
  struct Impl;
  Impl& impl() const { return *stages_.front(); }  // the first stage: the whole model on one device
  int stages() const { return int(stages_.size()); }
  Impl& stage(int s) const { return *stages_[size_t(s)]; }
  std::string describe_stages() const;  // "layers 0-23 on cuda:0, 24-47 on cuda:1"

 private:
  std::vector<std::unique_ptr<Impl>> stages_;
};

// The KV cache of the next evaluate_perplexity: f16 (every layer f16) or a quantized method the
// GPU runs (libquant/cuda/kv.h: affine, kivi, turboquant_mse natively, every other method of the
// CPU table through its CPU codec; cache or decode mode); UserError "... not on cuda yet" for the
// rest (f32, per-layer recipes, key centering, stats). evaluate_perplexity sets opt.kv itself; this is for
// auto_batch, whose scratch depends on it.
void set_kv(GpuModel& m, const kv::KVConfig& cfg);
// The same checks before the model is on the GPU (UserError for what the GPU does not run);
// rope_inv_freq: the model's RoPE frequencies (CommVQ needs them).
void check_kv(const kv::KVConfig& cfg, int head_dim, const std::vector<float>& rope_inv_freq = {});

// Chunks per forward call when `batch` is 0: as many as fit a budget of tokens and memory.
int auto_batch(const GpuModel& m, int ctx);
// Several devices (a pipeline): chunks per micro-batch when `batch` is 0 — auto_batch's, fewer
// where the n_chunks of the text would make fewer than 16 micro-batches a stage.
int pipeline_micro_batch(const GpuModel& m, int ctx, int n_chunks);

// The GPU's ChunkScorer (perplexity.h): `batch` chunks per forward (0: auto_batch; several
// devices: chunks per micro-batch, 0: pipeline_micro_batch; pipeline.cpp), the KV cache
// opt.kv (empty: f16; see set_kv), with `base` the KL divergence against it (both models on the
// GPU, the full-vocabulary log-softmax of both per scored row, kld.cu). The models must outlive it.
std::unique_ptr<ChunkScorer> make_scorer(GpuModel& m, int batch, GpuModel* base = nullptr);

// evaluate_perplexity (perplexity.h) with make_scorer(m, batch, base).
PplResult evaluate_perplexity(GpuModel& m, const std::vector<int32_t>& tokens, const PplOptions& opt, int batch,
                              const ProgressFn& progress = {}, GpuModel* base = nullptr);

// The logits [n, vocab] of ids as one fresh sequence (positions 0 … n−1).
std::vector<float> forward_logits(GpuModel& m, const std::vector<int32_t>& ids);

// bench --peak --device cuda: the tensor-core rates our GEMMs reach (cuBLASLt, the kernels eval-ppl
// uses) on large random operands, and the device-to-device copy bandwidth (bytes read + written).
struct GpuPeaks {
  int n = 0;               // the GEMMs are n × n × n
  double bf16_tflops = 0;  // bf16 operands, fp32 accumulate and output
  double int8_tops = 0;    // int8 operands, int32 accumulate and output
  double copy_gbps = 0;
};
GpuPeaks measure_peaks(int n = 8192);

// The GPU kernels one by one on host data, for the tests (tests/test_cuda.cpp) against the CPU ops.
namespace testing {
// RMSNorm of rows × dim → bf16, returned as float.
std::vector<float> rmsnorm(const std::vector<float>& x, const std::vector<float>& w, int rows, int dim, float eps);
// qkv [n, (nh + 2·nkv)·hd] fp32 at positions row % T → RoPE'd q, k and v as f16 (returned as float,
// q then k then v, each [n, heads·hd]).
std::vector<float> rope_split(const std::vector<float>& qkv, int n, int T, int nh, int nkv, int hd,
                              const std::vector<float>& cos, const std::vector<float>& sin);
// gu [n, 2F] (gate | up) → silu(gate)·up as bf16, returned as float.
std::vector<float> swiglu(const std::vector<float>& gu, int n, int F);
// Y [n, out] = X [n, in] · W [out, in]ᵀ with both operands rounded to bf16, fp32 accumulate.
std::vector<float> gemm_bf16(const std::vector<float>& w, int out, int in, const std::vector<float>& x, int n);
// Causal attention of B chunks of T tokens; q [B·T, nh·hd], k/v [B·T, nkv·hd] rounded to f16;
// fused or materialised (Attention's choice where the fused kernel does not apply), with a
// sliding window, soft-cap and per-head sink logits (fused only) where given; tile ≠ 0: the fused
// kernel's block shape of that number (attention_fused.h) instead of the default.
std::vector<float> attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                             int B, int T, int nh, int nkv, int hd, float scale, bool fused = true, int window = 0,
                             float softcap = 0, const std::vector<float>& sinks = {}, int tile = 0);
// Device milliseconds per call of the fused kernel (tile: attention_fused.h; 0 the default) and,
// tile −1, of the materialised path, on random q, k, v of the shape: the mean of `reps` calls.
float attention_ms(int B, int T, int nh, int nkv, int hd, int tile, int reps);
// W8A8: RMSNorm then per-token int8 (codes, scales); the exact int32 product of int8 W [out, in]
// and X [n, in]; y (+)= sx · (sw · acc); SwiGLU of a gate|up int32 product, quantized per token.
struct Q8 {
  std::vector<int8_t> q;
  std::vector<float> s;
};
Q8 rmsnorm_q8(const std::vector<float>& x, const std::vector<float>& w, int rows, int dim, float eps);
std::vector<int32_t> gemm_i8(const std::vector<int8_t>& w, int out, int in, const std::vector<int8_t>& x, int n);
std::vector<float> dequant(const std::vector<int32_t>& acc, int rows, int out, const std::vector<float>& sx,
                           const std::vector<float>& sw, std::vector<float> y, bool accumulate);
Q8 swiglu_q8(const std::vector<int32_t>& acc, int rows, int F, const std::vector<float>& sx,
             const std::vector<float>& sw);
// The other W8A8 passes: x += sx·(sw·acc) then RMSNorm + int8 (x returned too); per-token int8
// of x; rope_split_q8 of a q|k|v int32 product (q, k, v as f16 values, concatenated).
Q8 residual_rmsnorm_q8(const std::vector<int32_t>& acc, const std::vector<float>& sx_acc, const std::vector<float>& sw,
                       std::vector<float>& x, const std::vector<float>& w, int rows, int dim, float eps);
Q8 quant_rows(const std::vector<float>& x, int rows, int dim);
std::vector<float> rope_split_q8(const std::vector<int32_t>& acc, const std::vector<float>& sx,
                                 const std::vector<float>& sw, int n, int T, int nh, int nkv, int hd,
                                 const std::vector<float>& cos, const std::vector<float>& sin);
// The int8 GEMM after GemmLt::tune has timed cuBLASLt's candidates for the shape (the pick returned in *pick).
std::vector<int32_t> gemm_i8_tuned(const std::vector<int8_t>& w, int out, int in, const std::vector<int8_t>& x, int n,
                                   int* pick);
// FP8 (E4M3 bytes): RMSNorm then per-token E4M3; per-token E4M3 of x; the fp32 sums of E4M3
// W [out, in] and X [n, in] (in a multiple of 16); SwiGLU of a gate|up fp32 sum, to E4M3; and
// the epilogue y (+)= sx · (sw · acc).
struct F8 {
  std::vector<uint8_t> q;
  std::vector<float> s;
};
F8 rmsnorm_f8(const std::vector<float>& x, const std::vector<float>& w, int rows, int dim, float eps);
F8 quant_rows_f8(const std::vector<float>& x, int rows, int dim);
std::vector<float> gemm_f8(const std::vector<uint8_t>& w, int out, int in, const std::vector<uint8_t>& x, int n);
F8 swiglu_f8(const std::vector<float>& acc, int rows, int F, const std::vector<float>& sx,
             const std::vector<float>& sw);
std::vector<float> dequant_f8(const std::vector<float>& acc, int rows, int out, const std::vector<float>& sx,
                              const std::vector<float>& sw, std::vector<float> y, bool accumulate);
// The W8A8 / FP8 gate|up GEMM with SwiGLU fused (gemm_q8_fused.h) on host data: whether this build
// and device run it; h [n, F] = silu(g)·u of W [2F, in] in gate-then-up order (interleaved here, as
// the loader does), int8 codes or (f8) E4M3 bytes; device ms per call (the mean of `reps`) on random
// codes of the shape, of that GEMM + quant_rows (fused) or of cuBLASLt's gate|up GEMM + swiglu_q8
// (the path it replaces).
bool q8_fused_available();
std::vector<float> gemm_q8_swiglu(const std::vector<int8_t>& w, int F, int in, const std::vector<float>& sw,
                                  const std::vector<int8_t>& x, int n, const std::vector<float>& sx);
std::vector<float> gemm_f8_swiglu(const std::vector<uint8_t>& w, int F, int in, const std::vector<float>& sw,
                                  const std::vector<uint8_t>& x, int n, const std::vector<float>& sx);
float q8_swiglu_ms(bool fused, bool f8, int F, int in, int n, int reps);
// The q|k|v GEMM with RoPE fused (gemm_q8_fused.h): D [n, out] (f16, as float); device ms per call
// at a shape (q heads nh, kv heads nkv, T 512) of that GEMM (fused) or of cuBLASLt's GEMM +
// rope_split_q8 (the path it replaces).
std::vector<float> gemm_q8_rope(const std::vector<int8_t>& w, int out, int in, const std::vector<float>& sw,
                                const std::vector<int8_t>& x, int n, const std::vector<float>& sx, int T, int hd,
                                int rot, const std::vector<float>& cos, const std::vector<float>& sin);
std::vector<float> gemm_f8_rope(const std::vector<uint8_t>& w, int out, int in, const std::vector<float>& sw,
                                const std::vector<uint8_t>& x, int n, const std::vector<float>& sx, int T, int hd,
                                int rot, const std::vector<float>& cos, const std::vector<float>& sin);
float q8_rope_ms(bool fused, bool f8, int in, int nh, int nkv, int hd, int n, int reps);
// MLX affine codes (rows of LSB-first bit streams), fp32 scales/biases [rows, cols/group], rounding
// to the stored dtype (0 f32, 1 bf16, 2 f16) → the bf16 matrix, returned as float.
std::vector<float> affine_dequant(const std::vector<uint8_t>& codes, const std::vector<float>& scales,
                                  const std::vector<float>& biases, int rows, int cols, int bits, int group,
                                  int round_mode);
// A Dequantized row's weights (nvfp4, mxfp4, fp8_block; parts stacked as the forward stacks q|k|v)
// uploaded as stored and decoded to bf16 (blockfp.h), returned as float.
std::vector<float> blockfp_dequant(const std::vector<const PackedTensor*>& parts);
// FP8_BLOCK's projections through the bf16 decode instead of the block-scaled FP8 GEMMs (the
// tensor-core path's comparison); call before the model's first forward.
void force_fp8_block_decode(GpuModel& m);
// W8A8's gate|up through cuBLASLt's GEMM and swiglu_q8 instead of the fused GEMM (gemm_q8_fused.h):
// the rows interleaved at load put back; call before the model's first forward.
void force_unfused_gate_up(GpuModel& m);
// W8A8's q|k|v through cuBLASLt's GEMM and rope_split_q8 instead of the fused GEMM, attention on
// packed q, k, v; call before the model's first forward.
void force_unfused_qkv(GpuModel& m);
// Whether m's next forward runs that fused GEMM (q|k|v with RoPE; gate|up with SwiGLU).
bool runs_q8_rope(GpuModel& m);
bool runs_q8_swiglu(GpuModel& m);
// The row's activation rounding (blockfp.h) of x [rows, k]: io 0 fp32 out, 1 bf16 out (the GEMM's
// operand), 2 nvfp4's factored form (bf16 q·e, then the rows' global scales appended); as float.
std::vector<float> round_activations(const Scheme& row, const std::vector<float>& x, int rows, int k, int io);
// fp8_block's activations for the FP8 tensor cores (blockfp.h quantize_fp8_groups) of x [rows, k]:
// E4M3 codes [rows, k] and scales [k/128, rows] (token-major).
F8 quantize_fp8_groups(const std::vector<float>& x, int rows, int k);
// fp8_block parts stacked as the forward stacks q|k|v (upload_blockfp), x [n, in] quantized on the
// GPU, the block-scaled FP8 GEMM of each segment (GemmLt::run_block_f8): Y [n, rows]; empty where
// cuBLASLt refused one. y0: Y's initial values with accumulate (empty: beta = 0).
std::vector<float> gemm_fp8_block(const std::vector<const PackedTensor*>& parts, const std::vector<float>& x, int n,
                                  const std::vector<float>& y0 = {});
// KV methods (kv.h) on one sequence of n tokens of one kv head, x [n, D] rounded to f16 on the
// way up: the code array of positions < boundary(n) (the CPU codec's layout, groups back to back),
// and the f16 domain vectors attention reads (decoded, then the exact window in the domain).
std::vector<uint8_t> kv_encode(const kv::KVSpec& spec, bool key, const kv::KVConfig& cfg, const std::vector<float>& x,
                               int n, int D);
std::vector<float> kv_decode(const kv::KVSpec& spec, bool key, const kv::KVConfig& cfg, const std::vector<float>& x,
                             int n, int D);
// Causal attention of B chunks of T tokens through the GPU KV cache of cfg (cfg.k[0], cfg.v[0],
// mode, residual): q [B·T, nh·D], k, v [B·T, nkv·D] (rounded to f16), out [B·T, nh·D].
// rope_inv_freq: the RoPE of the positions (CommVQ); layer: the layer whose codecs run (calibrated methods).
std::vector<float> kv_attention(const kv::KVConfig& cfg, const std::vector<float>& q, const std::vector<float>& k,
                                const std::vector<float>& v, int B, int T, int nh, int nkv, int D, float scale,
                                const std::vector<float>& rope_inv_freq = {}, int layer = 0);
// kld_token (kld.h) of rows × V base and test logits.
std::vector<KldToken> kld_rows(const std::vector<float>& base, const std::vector<float>& test, int rows, int V,
                               const std::vector<int32_t>& targets);
// log Σ exp(row) − row[target] for rows × V logits.
std::vector<double> token_nll(const std::vector<float>& logits, int rows, int V, const std::vector<int32_t>& targets);
}  // namespace testing

}  // namespace qt::cuda
