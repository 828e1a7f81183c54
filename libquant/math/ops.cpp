// ops.h: dispatch to the kernel level's copy of ops_impl.inc, the row-parallel drivers, the
// RoPE table and the scalar attention reference.
#include "libquant/math/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "formats/tensor.h"
#include "libquant/cpu_features.h"

namespace qt::ops {

// The task slice of the calling thread when a ShareAttention is alive (parts 0: none).
struct AttentionShare {
  int part = 0, parts = 0;
};
inline thread_local AttentionShare attention_share;

// All standard headers are included above: the target pragmas below must only apply to the
// functions of ops_impl.inc.
namespace lvl_scalar {
constexpr int W = 4, R = 4, CV = 2;
#include "libquant/math/ops_impl.inc"
}  // namespace lvl_scalar

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace lvl_avx2 {
constexpr int W = 8, R = 4, CV = 2;
#include "libquant/math/ops_impl.inc"
}  // namespace lvl_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
namespace lvl_avx512 {
constexpr int W = 16, R = 6, CV = 4;
#include "libquant/math/ops_impl.inc"
}  // namespace lvl_avx512
#pragma GCC pop_options

#define QT_OPS_DISPATCH(call)                          \
  switch (kernel_level()) {                            \
    case KernelLevel::AMX:                             \
    case KernelLevel::AVX512: return lvl_avx512::call; \
    case KernelLevel::AVX2: return lvl_avx2::call;     \
    default: return lvl_scalar::call;                  \
  }

namespace {
// Below this many values per call the threads cost more than they save.
constexpr int64_t kParallelMin = 1 << 14;
}  // namespace

void rmsnorm(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride, int64_t rows, int64_t dim,
             float eps) {
  const KernelLevel lvl = kernel_level();
#pragma omp parallel for schedule(static) if (rows * dim >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    if (lvl >= KernelLevel::AVX512)
      lvl_avx512::rmsnorm_row(xr, w, yr, dim, eps);
    else if (lvl == KernelLevel::AVX2)
      lvl_avx2::rmsnorm_row(xr, w, yr, dim, eps);
    else
      lvl_scalar::rmsnorm_row(xr, w, yr, dim, eps);
  }
}

namespace {

// YaRN, as transformers computes it (modeling_rope_utils.py _compute_yarn_parameters): frequency i
// blends the interpolated (÷ factor) and the original frequency by a linear ramp over the
// dimensions between the beta_fast and beta_slow correction dims; tensors in float32, the ramp's
// ends in double.
float yarn_inv_freq(const RopeScaling& rs, double base, int dim, int i) {
  auto correction_dim = [&](double rot) {
    return dim * std::log(rs.original_max_position_embeddings / (rot * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = correction_dim(rs.beta_fast), high = correction_dim(rs.beta_slow);
  if (rs.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0), high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  const float pos = std::pow(float(base), float(2 * i) / float(dim));
  const float extra = 1.0f / pos, inter = 1.0f / (rs.factor * pos);
  const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.0f, 1.0f);
  const float ef = 1.0f - ramp;
  return inter * (1.0f - ef) + extra * ef;
}

float yarn_attention_factor(const RopeScaling& rs) {
  if (rs.attention_factor > 0) return rs.attention_factor;
  return rs.factor <= 1 ? 1.0f : float(0.1 * std::log(double(rs.factor)) + 1.0);
}

}  // namespace

RopeTable::RopeTable(const ModelConfig& cfg, float theta) {
  ModelConfig c = cfg;
  c.rope_theta = theta;
  c.rope_scaling = RopeScaling{};
  *this = RopeTable(c);
}

RopeTable::RopeTable(const ModelConfig& cfg) {
  const int d = cfg.head_dim;
  half_ = d / 2;
  inv_freq_.resize(half_);
  const RopeScaling& rs = cfg.rope_scaling;
  for (int i = 0; i < half_; ++i) {
    // transformers: 1.0 / (base ** (arange(0, d, 2).float() / d)), all in float32.
    float e = float(2 * i) / float(d);
    float f = 1.0f / std::pow(cfg.rope_theta, e);
    if (rs.type == "llama3") {
      const float old_ctx = float(rs.original_max_position_embeddings);
      const float lo_wav = old_ctx / rs.low_freq_factor, hi_wav = old_ctx / rs.high_freq_factor;
      const float wavelen = 2.0f * float(M_PI) / f;
      if (wavelen > lo_wav) {
        f = f / rs.factor;
      } else if (wavelen >= hi_wav) {
        const float s = (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0f - s) * f / rs.factor + s * f;
      }
    } else if (rs.type == "linear") {
      f = f / rs.factor;
    } else if (rs.type == "yarn") {
      f = yarn_inv_freq(rs, cfg.rope_theta, d, i);
    }
    inv_freq_[i] = f;
  }
  if (rs.type == "yarn") scale_ = yarn_attention_factor(rs);
}

void RopeTable::ensure(int n_pos) {
  if (n_pos <= n_pos_) return;
  cos_.resize(size_t(n_pos) * half_);
  sin_.resize(size_t(n_pos) * half_);
  for (int p = n_pos_; p < n_pos; ++p)
    for (int i = 0; i < half_; ++i) {
      const float a = float(p) * inv_freq_[i];  // float32 product, as torch computes it
      cos_[size_t(p) * half_ + i] = std::cos(a) * scale_;
      sin_[size_t(p) * half_ + i] = std::sin(a) * scale_;
    }
  n_pos_ = n_pos;
}

void rope(float* x, int64_t stride, int64_t rows, int n_heads, int head_dim, int pos0, const RopeTable& table) {
  const KernelLevel lvl = kernel_level();
#pragma omp parallel for schedule(static) if (rows * n_heads * head_dim >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * stride;
    const float* c = table.cos(pos0 + int(r));
    const float* s = table.sin(pos0 + int(r));
    if (lvl >= KernelLevel::AVX512)
      lvl_avx512::rope_row(xr, n_heads, head_dim, c, s);
    else if (lvl == KernelLevel::AVX2)
      lvl_avx2::rope_row(xr, n_heads, head_dim, c, s);
    else
      lvl_scalar::rope_row(xr, n_heads, head_dim, c, s);
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t rows, int64_t n) {
  const KernelLevel lvl = kernel_level();
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * n;
    const float* u = up + r * n;
    float* o = out + r * n;
    if (lvl >= KernelLevel::AVX512)
      lvl_avx512::swiglu_row(g, u, o, n);
    else if (lvl == KernelLevel::AVX2)
      lvl_avx2::swiglu_row(g, u, o, n);
    else
      lvl_scalar::swiglu_row(g, u, o, n);
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

RowStats row_stats(const float* logits, int n) { QT_OPS_DISPATCH(row_stats_impl(logits, n)); }

double kl_row(const float* base, double lse_base, const float* test, double lse_test, int n) {
  QT_OPS_DISPATCH(kl_row_impl(base, lse_base, test, lse_test, n));
}

void exp_inplace(float* x, int64_t n) { QT_OPS_DISPATCH(exp_span(x, n)); }

ShareAttention::ShareAttention(int part, int parts) { attention_share = {part, parts}; }
ShareAttention::~ShareAttention() { attention_share = {}; }

AttentionTasks attention_tasks(int64_t tasks) {
  const AttentionShare share = attention_share;
  if (!share.parts) return {0, tasks, true};
  return {tasks * share.part / share.parts, tasks * (share.part + 1) / share.parts, false};
}

void attention(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads, int head_dim,
               float scale, const AttnLayout& kv, float* out, int64_t out_stride) {
  const KernelLevel lvl = kernel_level();
  // The tiles need whole vectors of head dimensions.
  if (lvl >= KernelLevel::AVX512 && head_dim % 16 == 0)
    return lvl_avx512::attention_impl(q, q_stride, n_q, first_pos, n_heads, n_kv_heads, head_dim, scale, kv, out,
                                      out_stride);
  if (lvl >= KernelLevel::AVX2 && head_dim % 8 == 0)
    return lvl_avx2::attention_impl(q, q_stride, n_q, first_pos, n_heads, n_kv_heads, head_dim, scale, kv, out,
                                    out_stride);
  if (head_dim % 4 == 0)
    return lvl_scalar::attention_impl(q, q_stride, n_q, first_pos, n_heads, n_kv_heads, head_dim, scale, kv, out,
                                      out_stride);
  attention_ref(q, q_stride, n_q, first_pos, n_heads, n_kv_heads, head_dim, scale, kv, out, out_stride);
}

void attention_ref(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads, int head_dim,
                   float scale, const AttnLayout& kv, float* out, int64_t out_stride) {
  const int group = n_heads / n_kv_heads;
  std::vector<double> s, o(head_dim);
  for (int i = 0; i < n_q; ++i) {
    const int len = first_pos + i + 1;
    s.assign(len, 0.0);
    for (int h = 0; h < n_heads; ++h) {
      const float* qh = q + i * q_stride + int64_t(h) * head_dim;
      const int64_t base = (h / group) * kv.kv_head_stride;
      auto kt = [&](int64_t i) { return kv.kt16 ? f16_to_f32(kv.kt16[base + i]) : kv.kt[base + i]; };
      auto v = [&](int64_t i) { return kv.v16 ? f16_to_f32(kv.v16[base + i]) : kv.v[base + i]; };
      double mx = -INFINITY;
      for (int j = 0; j < len; ++j) {
        double acc = 0;
        for (int d = 0; d < head_dim; ++d) acc += double(qh[d]) * kt(d * kv.kt_stride + j);
        s[j] = acc * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int j = 0; j < len; ++j) sum += (s[j] = std::exp(s[j] - mx));
      std::fill(o.begin(), o.end(), 0.0);
      for (int j = 0; j < len; ++j)
        for (int d = 0; d < head_dim; ++d) o[d] += s[j] * v(j * kv.v_stride + d);
      float* oh = out + i * out_stride + int64_t(h) * head_dim;
      for (int d = 0; d < head_dim; ++d) oh[d] = float(o[d] / sum);
    }
  }
}

}  // namespace qt::ops
