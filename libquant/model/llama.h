// The decoder on the CPU, llama2.c style, for every row of formats/arch.h:
//
//   x = embed(tokens)                                   (× √hidden where the row says)
//   per layer:  x += attn_post(o_proj(attention(rope(qk_norm(q)), rope(qk_norm(k)), v)))
//                                                       q,k,v = proj(attn_pre(x))
//               x += ffn_post(down(act(gate(h)) * up(h)))        h = ffn_pre(x)
//               (a mixture-of-experts layer: x += Σ_top-k p_e · down_e(silu(gate_e(h)) * up_e(h)),
//                the experts run grouped, one GEMM per expert over its tokens: LlamaModel::moe_ffn)
//   logits = softcap(lm_head(rmsnorm(x)))
//
// One block reads the arch row: which of the four norms exist (llama: the two pre-norms; Gemma:
// all four; OLMo 2: the two post-norms), the activation (SiLU or tanh-GELU), q/k norms per head or
// over the whole projection, q/k/v biases, and per layer the RoPE table (global, Gemma 3's local
// base, or none: SmolLM3's no-RoPE layers). Soft-capped and sliding-window attention live in the
// KV cache (KVShape). Every projection is a Linear (libquant/linear/linear.h) made by a
// LinearFactory, and the attention goes through a KVCache (libquant/kv/cache.h), so packed /
// quantized weights and quantized caches plug in without touching the block code.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "libquant/kv/cache.h"
#include "libquant/linear/linear.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/math/ops.h"

namespace qt {

// Builds the Linear of the weight named `name` (HF name, e.g. "model.layers.0.mlp.up_proj.weight";
// "lm_head.weight" for the output head, which for a tied model is the embedding tensor).
// `bias` is null when the projection has none.
using LinearFactory =
    std::function<std::unique_ptr<Linear>(const std::string& name, const Tensor& w, const Tensor* bias)>;

// The default: make_dense_linear over the fp32 values of `w` (fp32 or bf16 compute).
LinearFactory dense_linear_factory(Compute compute);

// For any checkpoint: a weight that `ck` stores quantized (packed_weight, libquant/schemes/
// packed_io.h) becomes a packed Linear computing from its codes (make_packed_linear with `opt`);
// the others are dense as dense_linear_factory(opt.compute) makes them. `ck` must outlive the
// factory's calls (the LlamaModel constructor), not the Linears (they share its storage).
LinearFactory checkpoint_linear_factory(const Checkpoint& ck, const PackedLinearOptions& opt);

// Called with the input of every Linear before it runs (calibration statistics):
// name of the weight, x [n_tokens, in_features].
using LinearObserver =
    std::function<void(const std::string& name, const float* x, int64_t n_tokens, int64_t in_features)>;

// The activations of one forward (what a batch leaves between the layers), sized for the largest
// batch it has seen. LlamaModel keeps one for the calls that pass none; a caller running several
// sequences at once gives each its own.
struct ForwardScratch {
  int cap = 0;  // rows the buffers hold
  std::vector<float> x, xb, q, k, v, att, hb, hb2;
  std::vector<float> moe_probs, moe_x, moe_g, moe_u, moe_y;  // LlamaModel::moe_ffn's
};

class LlamaModel {
 public:
  // Takes what it needs from `ck` (the embedding table is shared, not copied); `ck` may be
  // destroyed afterwards. UserError for a missing tensor or an unsupported configuration.
  LlamaModel(const Checkpoint& ck, const LinearFactory& make_linear) : LlamaModel(ck, make_linear, nullptr) {}
  LlamaModel(const Checkpoint& ck, Compute compute) : LlamaModel(ck, dense_linear_factory(compute)) {}
  // The same, releasing each of ck's tensors as soon as it is packed (lower peak memory);
  // ck keeps its config and tokenizer but no tensors.
  LlamaModel(Checkpoint&& ck, const LinearFactory& make_linear) : LlamaModel(ck, make_linear, &ck) {}
  LlamaModel(Checkpoint&& ck, Compute compute) : LlamaModel(std::move(ck), dense_linear_factory(compute)) {}
  ~LlamaModel();

  const ModelConfig& config() const { return cfg_; }

  // A cache of `method` ("f32") sized for this model and max_ctx positions.
  std::unique_ptr<KVCache> make_cache(int max_ctx, const std::string& method = "f32") const;
  // A cache per `config` (per-layer methods, libquant/kv/spec.h).
  std::unique_ptr<KVCache> make_cache(int max_ctx, const kv::KVConfig& config) const;
  KVShape kv_shape(int max_ctx) const;

  // Runs tokens[0..n) at positions pos0 … pos0+n−1 (appending their K/V to `cache`, which must
  // hold exactly pos0 positions) and writes the logits of rows [out_first, out_first+n_out)
  // to `logits` ([n_out, vocab], row-major). Rows outside that range skip the output head.
  // Not thread-safe: one forward at a time per model through its own scratch (see the
  // ForwardScratch overload of forward_hidden for several at once).
  void forward(const int32_t* tokens, int n, int pos0, KVCache& cache, int out_first, int n_out, float* logits);
  // The same in two steps, for callers that want the (largest) output head in slices:
  // forward_hidden returns the final-normed hidden states [n, hidden] (valid until the next
  // call), output_head turns rows of them into logits [rows, vocab].
  const float* forward_hidden(const int32_t* tokens, int n, int pos0, KVCache& cache);
  void output_head(const float* hidden, int rows, float* logits);
  // forward_hidden into the caller's scratch (the result lives in it). Calls with distinct
  // scratch and caches may run at once, each from its own thread with its own OpenMP team, once
  // reserve_positions covers every position they reach and no observer is set; output_head
  // likewise (the weights are only read).
  const float* forward_hidden(const int32_t* tokens, int n, int pos0, KVCache& cache, ForwardScratch& s);
  // The RoPE tables for positions [0, n_pos): afterwards forwards below n_pos only read them.
  void reserve_positions(int n_pos);
  // Bytes of a ForwardScratch after a forward of n tokens through dense layers.
  size_t scratch_bytes(int n) const;

  void set_observer(LinearObserver obs) { observer_ = std::move(obs); }

  // One block at a time, for calibration that quantizes layer by layer (calib/gptq.h):
  // embed_tokens writes the embeddings [n, hidden]; forward_layer runs block l on x in place
  // (appending to layer l of `cache`); forward_hidden is embed_tokens, every forward_layer, the
  // final norm. set_linear replaces a block's projection (`name` as the observer sees it after
  // the layer prefix: "self_attn.q_proj.weight", "mlp.down_proj.weight", an expert's
  // "mlp.experts.3.up_proj.weight", ...: libquant/model/block_tensors.h block_projections).
  void embed_tokens(const int32_t* tokens, int n, float* x) const { embed(tokens, n, x); }
  void forward_layer(int l, float* x, int n, int pos0, KVCache& cache);
  void set_linear(int l, const std::string& name, std::unique_ptr<Linear> lin);
  // The final RMSNorm (the output head's input) of x [n, hidden] into out.
  void final_norm(const float* x, int n, float* out) const;

  // Bytes of the weights as held for compute (all Linears, embedding table, norms).
  size_t weight_bytes() const;
  // Bytes of the weights one decoded token reads: weight_bytes() less the embedding table (a token
  // reads one row of it); every Linear, the output head and the norms. A sparse model's experts all
  // count, though a token reads only its routed ones.
  size_t token_weight_bytes() const;
  std::string linear_kind() const;  // kind() of the projections ("f32", "bf16", …)

 private:
  struct Layer;
  LlamaModel(const Checkpoint& ck, const LinearFactory& make_linear, Checkpoint* consume);
  // Runs l on x; the observer, when set, sees the weight's name (*prefix + name).
  void linear(const Linear& l, const std::string* prefix, const char* name, const float* x, int64_t n, float* y);
  // The same for count Linears that read one x (forward_shared_input: one fork, one conversion of x).
  void linears(const Linear* const* ls, const char* const* names, int count, const std::string* prefix, const float* x,
               int64_t n, float* const* ys);
  void embed(const int32_t* tokens, int n, float* x) const;
  void ensure_scratch(ForwardScratch& s, int n) const;
  void forward_layer(int l, float* x, int n, int pos0, KVCache& cache, ForwardScratch& s);
  // A sparse layer's FFN: in [n, hidden] -> out [n, hidden].
  void moe_ffn(const Layer& L, const float* in, int n, float* out, ForwardScratch& s);
  // The decode step (llama_decode.cpp): one token in one OpenMP team, every Linear's rows cut
  // between the threads (Linear::gemv_slice). Used by forward() for a single token when every
  // Linear has slices and no observer is set; logits may be null (no output head).
  bool decode_ready() const;
  void forward_token(int32_t token, int pos, KVCache& cache, float* logits);

  ModelConfig cfg_;
  const ArchDesc* desc_;             // cfg_'s row
  Tensor embedding_;                 // [vocab, hidden], any float dtype, shared with the checkpoint; or, when
                                     // the checkpoint stores it quantized, empty and embed_q_ holds it
  std::shared_ptr<Linear> embed_q_;  // quantized embedding (rows via dequantize_row)
  std::vector<float> final_norm_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::shared_ptr<Linear> lm_head_;  // may be embed_q_ itself (tied, quantized)
  ops::RopeTable rope_;
  ops::RopeTable rope_local_;  // gemma3's sliding layers (base rope_local_theta); unused otherwise
  // Layer l's RoPE table (nullptr: the layer applies none).
  ops::RopeTable* rope_of(int l);
  LinearObserver observer_;

  ForwardScratch scratch_;  // the calls that pass none (and the decode step)
};

}  // namespace qt
