// The non-GEMM math of the forward pass and of the evaluation: RMSNorm, RoPE, SwiGLU, row
// statistics of logits (max, log-sum-exp, argmax) and causal attention over an fp32 K/V layout.
//
// Every function here is vectorized for the current kernel level (libquant/cpu_features.h:
// AVX-512 / AVX2 / baseline x86-64, one source compiled three times, see ops_impl.inc) and the
// batch-level ones split their rows over the OpenMP threads (--threads). Activations are fp32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/model_config.h"

namespace qt::ops {

// y[r] = x[r] / sqrt(mean(x[r]²) + eps) * w, for rows r of length dim (x may equal y).
// Row strides are in floats. Parallel over rows.
void rmsnorm(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride, int64_t rows, int64_t dim,
             float eps);

// Cos/sin of every (position, frequency) pair, in Hugging Face's float32 arithmetic:
// inv_freq[i] = 1 / theta^(2i/d) (then the llama3 or linear scaling of docs/spec/hf-config.md
// §RoPE), angle = float(pos) * inv_freq[i]. Grown on demand, never shrunk.
class RopeTable {
 public:
  RopeTable() = default;
  explicit RopeTable(const ModelConfig& cfg);
  // cfg's head_dim with base `theta` and no scaling (gemma3's sliding-window layers).
  RopeTable(const ModelConfig& cfg, float theta);
  void ensure(int n_pos);  // positions [0, n_pos) available
  int half() const { return half_; }
  const float* cos(int pos) const { return cos_.data() + size_t(pos) * half_; }
  const float* sin(int pos) const { return sin_.data() + size_t(pos) * half_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  int half_ = 0, n_pos_ = 0;
  float scale_ = 1.0f;  // YaRN's attention factor, on cos and sin as transformers applies it
  std::vector<float> inv_freq_, cos_, sin_;
};

// Rotate-half RoPE (HF layout: pairs (i, i+d/2) of each head), in place. Row r of x holds
// n_heads heads of head_dim at position pos0 + r; rows are `stride` floats apart.
void rope(float* x, int64_t stride, int64_t rows, int n_heads, int head_dim, int pos0, const RopeTable& table);

// out[i] = silu(gate[i]) * up[i] over `rows` rows of n values (row strides in floats).
void swiglu(const float* gate, const float* up, float* out, int64_t rows, int64_t n);

// out[i] = gelu_tanh(gate[i]) * up[i] (Gemma's GeGLU; gelu_tanh(x) = x/2 · (1 + tanh(√(2/π) ·
// (x + 0.044715 x³))), torch's gelu(approximate="tanh")) over rows × n values.
void geglu_tanh(const float* gate, const float* up, float* out, int64_t rows, int64_t n);

// x[i] = cap · tanh(x[i] / cap) over n values (Gemma's logit soft-capping).
void softcap_inplace(float* x, int64_t n, float cap);

// y[i] += x[i] over n values (the residual add). Parallel.
void add_inplace(float* y, const float* x, int64_t n);

// Max, argmax (first index of the max) and log Σ exp over one row of logits.
// lse accumulates in float lanes over blocks of 64 vectors, combined in double; exp is a vectorized Cephes-style
// polynomial (max relative error < 2e-7 over the range the softmax uses).
struct RowStats {
  float max = 0;
  int argmax = 0;
  double lse = 0;  // log Σ_v exp(l_v), including the max
};
RowStats row_stats(const float* logits, int n);

// Σ_v p_b(v) · (log p_b(v) − log p_t(v)) over one row, with p = softmax(logits) and the two
// rows' log-sum-exps given (row_stats). Exact over the whole vocabulary.
double kl_row(const float* base, double lse_base, const float* test, double lse_test, int n);

// Vectorized exp over n floats (in == out allowed); for tests and small callers.
void exp_inplace(float* x, int64_t n);

// ---- attention -------------------------------------------------------------------------------
// Causal attention for the fp32 layout the full-precision KV cache keeps per (layer, kv head):
//   kt: keys transposed, kt[d * kt_stride + j] = K[j][d]   (kt_stride ≥ padded key count)
//   v : values,          v[j * v_stride + d]   = V[j][d]
// Query row i of q (positions first_pos + i) attends to keys 0 … first_pos + i.
// q/out rows are q_stride/out_stride floats apart and hold n_heads heads of head_dim; query
// head h reads kv head h / (n_heads / n_kv_heads). `kv_head_stride`: floats between the
// kt (and v) blocks of consecutive kv heads. Scores are scaled by `scale`.
// Reads keys up to the next multiple of kAttnKeyPad past the last visible one: the cache pads
// its key capacity to that and keeps the padding finite (zero).
constexpr int kAttnKeyPad = 32;
struct AttnLayout {
  const float* kt;
  const float* v;
  int64_t kt_stride;       // floats between rows d of kt
  int64_t v_stride;        // floats between rows j of v
  int64_t kv_head_stride;  // floats between consecutive kv heads (same for kt and v blocks)
  // fp16 storage (the fp16 cache at 2 bytes a value): when set, the same layout in IEEE half
  // values (strides in values) is read instead of kt / v, widened exactly on load (F16C), so
  // the result equals the fp32 layout holding the same values.
  const uint16_t* kt16 = nullptr;
  const uint16_t* v16 = nullptr;
};
void attention(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads, int head_dim,
               float scale, const AttnLayout& kv, float* out, int64_t out_stride);

// For a team that already holds the threads (the decode step, llama_decode.cpp): while a
// ShareAttention lives on a thread, attention() (or attention_masked()) called on that thread computes only slice `part`
// of `parts` of its (head, row block) tasks, on that thread, instead of forking a team over all
// of them; each thread of the team calls it with its own part, and together they write every
// head once. The same bits per head as the forking call.
class ShareAttention {
 public:
  ShareAttention(int part, int parts);
  ~ShareAttention();
  ShareAttention(const ShareAttention&) = delete;
  ShareAttention& operator=(const ShareAttention&) = delete;
};
// The tasks [begin, end) of `tasks` an attention kernel runs on the calling thread: all of them
// with `fork` set (spread them over a team), or this thread's contiguous slice under a
// ShareAttention (no team of its own). Every attention kernel takes its tasks from here.
struct AttentionTasks {
  int64_t begin = 0, end = 0;
  bool fork = true;
};
AttentionTasks attention_tasks(int64_t tasks);

// The same attention with Gemma's two changes, for the layers that need them: scores
// s = q·k · scale are soft-capped (softcap · tanh(s / softcap), when softcap > 0), and a query
// at position p sees only keys p − window + 1 … p (when window > 0; transformers' sliding
// window: kv_idx > q_idx − window), and with `sinks` (gpt_oss, one logit per query head) the
// softmax's denominator also holds exp(sink). Plain loops (not the tiled kernels): the Llama path keeps
// its kernel untouched.
void attention_masked(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads,
                      int head_dim, float scale, float softcap, int window, const AttnLayout& kv, float* out,
                      int64_t out_stride, const float* sinks = nullptr);

// Scalar reference of the same computation (double accumulation, std::exp): the spec the
// vectorized kernels are tested against.
void attention_ref(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads, int head_dim,
                   float scale, const AttnLayout& kv, float* out, int64_t out_stride);

}  // namespace qt::ops
