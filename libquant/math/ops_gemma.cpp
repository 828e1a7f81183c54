// ops.h's Gemma pieces: GeGLU (gelu-tanh), logit soft-capping, and attention with soft-capped
// scores and a sliding window. None of them runs for the Llama family, so they are plain loops
// the compiler vectorizes, kept apart from the tuned kernels of ops_impl.inc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "formats/tensor.h"
#include "libquant/math/ops.h"

namespace qt::ops {

void geglu_tanh(const float* gate, const float* up, float* out, int64_t rows, int64_t n) {
  // torch's gelu(approximate="tanh") in float: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
  const float k = float(std::sqrt(2.0 / M_PI));
#pragma omp parallel for schedule(static) if (rows * n >= (1 << 14))
  for (int64_t i = 0; i < rows * n; ++i) {
    const float x = gate[i];
    const float g = 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
    out[i] = g * up[i];
  }
}

void softcap_inplace(float* x, int64_t n, float cap) {
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

namespace {

template <class T>
float widen(T v) {
  if constexpr (sizeof(T) == 2)
    return f16_to_f32(v);
  else
    return v;
}

// One (query row, head): scores over the visible keys, softmax in double, then P·V.
template <class T>
void attend_row(const float* qh, int lo, int hi, const T* kt, int64_t kts, const T* v, int64_t vs, int D, float scale,
                float softcap, const float* sink, float* s, float* oh) {
  const int n = hi - lo;
  std::fill(s, s + n, 0.0f);
  for (int d = 0; d < D; ++d) {
    const float qd = qh[d];
    const T* kr = kt + d * kts + lo;
    for (int j = 0; j < n; ++j) s[j] += qd * widen(kr[j]);
  }
  float mx = -INFINITY;
  for (int j = 0; j < n; ++j) {
    float x = s[j] * scale;
    if (softcap > 0) x = std::tanh(x / softcap) * softcap;
    s[j] = x;
    mx = std::max(mx, x);
  }
  if (sink) mx = std::max(mx, *sink);
  double sum = sink ? std::exp(double(*sink - mx)) : 0.0;
  for (int j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
  const float inv = float(1.0 / sum);
  std::fill(oh, oh + D, 0.0f);
  for (int j = 0; j < n; ++j) {
    const T* vr = v + int64_t(lo + j) * vs;
    const float p = s[j];
    for (int d = 0; d < D; ++d) oh[d] += p * widen(vr[d]);
  }
  for (int d = 0; d < D; ++d) oh[d] *= inv;
}

}  // namespace

void attention_masked(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads,
                      int head_dim, float scale, float softcap, int window, const AttnLayout& kv, float* out,
                      int64_t out_stride, const float* sinks) {
  const int group = n_heads / n_kv_heads;
  const int64_t tasks = int64_t(n_q) * n_heads;
  const AttentionTasks slice = attention_tasks(tasks);
#pragma omp parallel for schedule(dynamic, 4) if (tasks > 1 && slice.fork)
  for (int64_t t = slice.begin; t < slice.end; ++t) {
    thread_local std::vector<float> s;
    const int i = int(t / n_heads), h = int(t % n_heads);
    const int pos = first_pos + i;
    const int lo = window > 0 ? std::max(0, pos - window + 1) : 0, hi = pos + 1;
    if (s.size() < size_t(hi)) s.resize(size_t(hi));
    const float* qh = q + i * q_stride + int64_t(h) * head_dim;
    float* oh = out + i * out_stride + int64_t(h) * head_dim;
    const int64_t base = int64_t(h / group) * kv.kv_head_stride;
    const float* sink = sinks ? sinks + h : nullptr;
    if (kv.kt16)
      attend_row(qh, lo, hi, kv.kt16 + base, kv.kt_stride, kv.v16 + base, kv.v_stride, head_dim, scale, softcap, sink,
                 s.data(), oh);
    else
      attend_row(qh, lo, hi, kv.kt + base, kv.kt_stride, kv.v + base, kv.v_stride, head_dim, scale, softcap, sink,
                 s.data(), oh);
  }
}

}  // namespace qt::ops
