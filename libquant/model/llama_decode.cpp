// The decode step: one token through the model in ONE OpenMP team. Each Linear's output rows are
// cut between the threads (Linear::gemv_slice) and the threads meet at a TeamBarrier where the
// next step needs every row: the batch forward forks a team per Linear (~210 a token for
// SmolLM2), and at one token a fork's wake-ups cost as much as a small projection's arithmetic.
// Per layer, thread t of T:
//   own RMSNorm of x (a private copy: cheaper than a barrier) → its q, k, v rows       | barrier
//   thread 0: q/k norm, RoPE, cache append                                             | barrier
//   its heads of the attention (dense caches; a quantized one: thread 0, all heads)    | barrier
//   its o rows, added into x                                                           | barrier
//   own RMSNorm → its gate and up rows (the same slices) → SwiGLU of those rows        | barrier
//   its down rows, added into x                                                        | barrier
// then the final norm and its slice of the output head. The arithmetic is the batch forward's
// at one row, op for op, so the logits are the same bits.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <stdexcept>

#include "libquant/model/llama.h"
#include "libquant/model/llama_layer.h"
#include "libquant/parallel.h"
#include "libquant/team_barrier.h"

namespace qt {

bool LlamaModel::decode_ready() const {
  // The decode step runs the pre-norm SiLU block of the arch row (any q/k norm, any layer's RoPE);
  // post-norms (Gemma, OLMo 2), tanh-GELU and sliding windows (Gemma, phi3) are not in it: the
  // batch forward runs those at one token.
  // A mixture of experts routes each token to its own experts: the batch forward runs it at
  // one token, its projections one GEMM of one row each.
  const ArchDesc& a = *desc_;
  if (cfg_.is_moe()) return false;
  if (a.has_post_norms() || !a.norms.attn_pre || !a.norms.ffn_pre || a.act != Activation::Silu) return false;
  if (!cfg_.sliding.empty() || observer_ || !lm_head_->has_gemv_slices()) return false;
  for (const auto& L : layers_)
    for (const Linear* l :
         {L->wq.get(), L->wk.get(), L->wv.get(), L->wo.get(), L->gate.get(), L->up.get(), L->down.get()})
      if (!l->has_gemv_slices()) return false;
  return true;
}

namespace {

// SwiGLU's vector body starts at multiples of its width from a row's start: a slice that starts on
// a multiple of 16 takes the same path for each value as the whole row does.
constexpr int64_t kSwigluAlign = 16;

}  // namespace

void LlamaModel::forward_token(int32_t token, int pos, KVCache& cache, float* logits) {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden, D = c.head_dim, Q = int64_t(c.n_heads) * D, KV = int64_t(c.n_kv_heads) * D;
  ensure_scratch(scratch_, 1);
  for (int l = 0; l < c.n_layers; ++l)
    if (ops::RopeTable* r = rope_of(l)) r->ensure(pos + 1);
  ForwardScratch& s = scratch_;
  float *x = s.x.data(), *xb = s.xb.data(), *q = s.q.data(), *k = s.k.data(), *v = s.v.data(), *att = s.att.data(),
        *hb = s.hb.data(), *hb2 = s.hb2.data();
  embed(&token, 1, x);

  TeamBarrier barrier;
  // A throw inside the team cannot leave it: the first is kept, every thread still meets every
  // barrier (skipping the work), and it is rethrown after the team ends.
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto step = [&](auto&& work) {
    if (failed.load(std::memory_order_relaxed)) return;
    try {
      work();
    } catch (...) {
#pragma omp critical(qt_decode_error)
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  // y[rows of this thread's slice] += delta (the residual add, x shared by the team).
  auto add_rows = [](float* y, const float* delta, RowSlice rs) {
    for (int64_t i = rs.r0; i < rs.r1; ++i) y[i] += delta[i];
  };
  // The phases of layer l on thread t of T; xn is the thread's own normed copy of x.
  auto before_attention = [&](int l, int t, int T, float* xn) {
    const Layer& L = *layers_[size_t(l)];
    step([&] {
      ops::rmsnorm(x, H, L.attn_pre.data(), xn, H, 1, H, c.rms_eps);
      L.wq->gemv_slice(xn, t, T, q);
      L.wk->gemv_slice(xn, t, T, k);
      L.wv->gemv_slice(xn, t, T, v);
    });
    barrier.wait(T);
    if (t == 0)
      step([&] {
        if (desc_->qk_norm == QkNorm::PerHead) {
          ops::rmsnorm(q, D, L.q_norm.data(), q, D, c.n_heads, D, c.rms_eps);
          ops::rmsnorm(k, D, L.k_norm.data(), k, D, c.n_kv_heads, D, c.rms_eps);
        } else if (desc_->qk_norm == QkNorm::Whole) {
          ops::rmsnorm(q, Q, L.q_norm.data(), q, Q, 1, Q, c.rms_eps);
          ops::rmsnorm(k, KV, L.k_norm.data(), k, KV, 1, KV, c.rms_eps);
        }
        if (ops::RopeTable* rope = rope_of(l)) {
          ops::rope(q, Q, 1, c.n_heads, D, pos, *rope);
          ops::rope(k, KV, 1, c.n_kv_heads, D, pos, *rope);
        }
        cache.append(l, k, v, 1, pos);
      });
  };
  auto after_attention = [&](int l, int t, int T, float* xn) {
    const Layer& L = *layers_[size_t(l)];
    step([&] { add_rows(x, xb, L.wo->gemv_slice(att, t, T, xb)); });
    barrier.wait(T);
    step([&] {
      ops::rmsnorm(x, H, L.ffn_pre.data(), xn, H, 1, H, c.rms_eps);
      const RowSlice g = L.gate->gemv_slice(xn, t, T, hb);
      const RowSlice u = L.up->gemv_slice(xn, t, T, hb2);
      if (g.r0 != u.r0 || g.r1 != u.r1 || (g.r0 % kSwigluAlign && g.r0 != g.r1))
        throw std::logic_error("decode step: gate and up slices differ or are not aligned");
      ops::swiglu(hb + g.r0, hb2 + g.r0, hb + g.r0, 1, g.r1 - g.r0);
    });
    barrier.wait(T);
    step([&] { add_rows(x, xb, L.down->gemv_slice(hb, t, T, xb)); });
    barrier.wait(T);
  };
  auto head = [&](int t, int T, float* xn) {
    if (logits)
      step([&] {
        ops::rmsnorm(x, H, final_norm_.data(), xn, H, 1, H, c.rms_eps);
        lm_head_->gemv_slice(xn, t, T, logits);
      });
  };
  // body(t, T, xn) on every thread of one team.
  auto team = [&](auto&& body) {
#pragma omp parallel num_threads(num_threads())
    {
      thread_local std::vector<float> xn;
      xn.resize(size_t(H));
      body(omp_get_thread_num(), omp_get_num_threads(), xn.data());
    }
  };
  // The dense caches' attend only reads the cache (ops::attention), so every thread may call it
  // for its own heads; a quantized cache may keep scratch state, so one thread runs it whole.
  const bool shared_attend = cache.name() == "f16" || cache.name() == "f32" || cache.name() == "bf16";
  team([&](int t, int T, float* xn) {
    for (int l = 0; l < c.n_layers; ++l) {
      before_attention(l, t, T, xn);
      barrier.wait(T);
      if (shared_attend) {
        ops::ShareAttention share(t, T);
        step([&] { cache.attend(l, q, 1, pos, att); });
      } else if (t == 0) {
        step([&] { cache.attend(l, q, 1, pos, att); });
      }
      barrier.wait(T);
      after_attention(l, t, T, xn);
    }
    head(t, T, xn);
  });
  if (error) std::rethrow_exception(error);
}

}  // namespace qt
