// Attention over the bf16 cache's layouts (attention_bf16.h): the AVX512-BF16 tile kernel, the
// widening path for everything else, and the double-precision reference.
//
// The tile follows ops::attention's (ops_impl.inc): R query rows of one head against every key
// they see, scores for 32 keys at a time, the softmax in fp32 rows, then P·V over key pairs. Each
// VDPBF16PS takes one broadcast 32-bit pair (two query dims; or the weights of two keys) against
// 16 pairs of the cache (16 keys' two dims; or 16 dims of two keys' values).
#include "libquant/kv/attention_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "libquant/cpu_features.h"
#include "libquant/kernels/bf16.h"
#include "libquant/math/ops.h"

#define QT_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

namespace qt::kv {
namespace {

using kernels::bf16_to_float;
using kernels::round_bf16;

constexpr int R = 6;   // query rows of a tile: 2·R score accumulators, R·CV output ones
constexpr int CV = 4;  // zmm of head dimensions per P·V pass

// Lane sums and maxima through memory: GCC 12's reduce intrinsics warn about undefined vectors.
QT_AVX512BF16 inline float lane_sum(__m512 v) {
  float x[16], s = 0;
  _mm512_storeu_ps(x, v);
  for (float f : x) s += f;
  return s;
}
QT_AVX512BF16 inline float lane_max(__m512 v) {
  float x[16], m = -INFINITY;
  _mm512_storeu_ps(x, v);
  for (float f : x) m = std::max(m, f);
  return m;
}

int64_t padded(int64_t n) { return (n + ops::kAttnKeyPad - 1) / ops::kAttnKeyPad * ops::kAttnKeyPad; }

// out rows (NC·16 dims from c0) = Σ over key pairs of P·V, times inv[r].
template <int NC>
QT_AVX512BF16 inline void pv_pass(const uint16_t* const* prow, const uint16_t* vp, int D, int npairs, int c0,
                                  const float* inv, float* const* orow) {
  __m512 acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  const uint16_t* v = vp + int64_t(c0) * 2;
  for (int jp = 0; jp < npairs; ++jp, v += 2 * D) {
    __m512bh vv[NC];
    for (int c = 0; c < NC; ++c) vv[c] = (__m512bh)_mm512_loadu_si512(v + 32 * c);
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, prow[r] + 2 * jp, 4);
      const __m512bh p = (__m512bh)_mm512_set1_epi32(int(pair));
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], vv[c], p);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c)
      _mm512_storeu_ps(orow[r] + c0 + 16 * c, _mm512_mul_ps(acc[r][c], _mm512_set1_ps(inv[r])));
}

// One tile: rows at positions p0 … p0+nr−1 (qb: R rows of D/2 query pairs; rows past nr repeat
// row 0, and orow[r] = orow[0] there). S: R rows of sst floats; P: R rows of sst bf16.
QT_AVX512BF16 void tile(const uint32_t* qb, int nr, int p0, const uint16_t* kp, const uint16_t* vp, int64_t cap, int D,
                        float scale, float* const* orow, float* S, uint16_t* P, int64_t sst) {
  const int nk = p0 + nr, nkp = (nk + 31) / 32 * 32, half = D / 2;
  // 1. S = Q·Kᵀ, 32 keys at a time.
  for (int j0 = 0; j0 < nkp; j0 += 32) {
    __m512 a0[R], a1[R];
    for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
    const uint16_t* k = kp + int64_t(j0) * 2;
    for (int dp = 0; dp < half; ++dp, k += 2 * cap) {
      const __m512bh k0 = (__m512bh)_mm512_loadu_si512(k), k1 = (__m512bh)_mm512_loadu_si512(k + 32);
      for (int r = 0; r < R; ++r) {
        const __m512bh b = (__m512bh)_mm512_set1_epi32(int(qb[r * half + dp]));
        a0[r] = _mm512_dpbf16_ps(a0[r], k0, b);
        a1[r] = _mm512_dpbf16_ps(a1[r], k1, b);
      }
    }
    for (int r = 0; r < nr; ++r) {
      _mm512_storeu_ps(S + r * sst + j0, a0[r]);
      _mm512_storeu_ps(S + r * sst + j0 + 16, a1[r]);
    }
  }
  // 2. Row r sees keys 0 … p0+r: P = bf16(exp(scale·s − scale·max)), zero past its last key up to
  // 16·⌈nk/16⌉ (P·V reads ⌈nk/2⌉ pairs); 1/Σ of the rounded weights.
  float inv[R];
  const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (int r = 0; r < nr; ++r) {
    float* s = S + r * sst;
    uint16_t* p = P + r * sst;
    const int len = p0 + r + 1;
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < len; j += 16) {
      const __mmask16 m =
          _mm512_cmplt_epi32_mask(_mm512_add_epi32(lanes, _mm512_set1_epi32(j)), _mm512_set1_epi32(len));
      mv = _mm512_mask_max_ps(mv, m, mv, _mm512_maskz_loadu_ps(m, s + j));
    }
    const __m512 ms = _mm512_set1_ps(lane_max(mv) * scale), sc = _mm512_set1_ps(scale);
    for (int j = 0; j < len; j += 16)
      _mm512_storeu_ps(s + j, _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(s + j), sc), ms));
    ops::exp_inplace(s, len);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < nk; j += 16) {
      const __mmask16 m =
          _mm512_cmplt_epi32_mask(_mm512_add_epi32(lanes, _mm512_set1_epi32(j)), _mm512_set1_epi32(len));
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, s + j));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), (__m256i)b);
      sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
                                   0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, (__m256i)b), 16)));
    }
    inv[r] = 1.0f / lane_sum(sum);
  }
  for (int r = nr; r < R; ++r) inv[r] = inv[0];
  const uint16_t* prow[R];
  for (int r = 0; r < R; ++r) prow[r] = P + (r < nr ? r : 0) * sst;
  // 3. out = P·V / Σp.
  const int npairs = (nk + 1) / 2;
  int c0 = 0;
  for (; c0 + 16 * CV <= D; c0 += 16 * CV) pv_pass<CV>(prow, vp, D, npairs, c0, inv, orow);
  for (; c0 < D; c0 += 16) pv_pass<1>(prow, vp, D, npairs, c0, inv, orow);
}

void attention_tiles(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads, int D,
                     float scale, const Bf16Layout& kv, float* out, int64_t out_stride) {
  const int group = n_heads / n_kv_heads, half = D / 2;
  const int nb = (n_q + R - 1) / R;
  const int64_t tasks = int64_t(nb) * n_heads, sst = padded(first_pos + n_q);
  const ops::AttentionTasks slice = ops::attention_tasks(tasks);
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1 && slice.fork)
  for (int64_t t = slice.begin; t < slice.end; ++t) {
    thread_local std::vector<float> S;
    thread_local std::vector<uint16_t> P;
    thread_local std::vector<uint32_t> qb;
    if (S.size() < size_t(R * sst)) S.resize(size_t(R * sst)), P.resize(size_t(R * sst));
    qb.resize(size_t(R * half));
    const int b = nb - 1 - int(t / n_heads);  // late rows (the most keys) first
    const int h = int(t % n_heads), g = h / group;
    const int i0 = b * R, nr = std::min(R, n_q - i0);
    float* orow[R];
    for (int r = 0; r < R; ++r) {
      const int row = i0 + (r < nr ? r : 0);
      const float* qr = q + row * q_stride + int64_t(h) * D;
      for (int dp = 0; dp < half; ++dp)
        qb[size_t(r * half + dp)] = uint32_t(round_bf16(qr[2 * dp])) | uint32_t(round_bf16(qr[2 * dp + 1])) << 16;
      orow[r] = out + row * out_stride + int64_t(h) * D;
    }
    const uint16_t* kp = kv.base + g * kv.head_stride;
    tile(qb.data(), nr, first_pos + i0, kp, kp + kv.cap * D, kv.cap, D, scale, orow, S.data(), P.data(), sst);
  }
}

// The visible positions widened into the fp32 cache's layout (ops::AttnLayout), queries rounded
// to bf16, then the fp32 kernels. Per thread (a ShareAttention's threads each widen for their own
// slice of the heads).
void attention_widened(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads, int D,
                       float scale, const Bf16Layout& kv, float* out, int64_t out_stride, float softcap, int window,
                       const float* sinks) {
  const int nk = first_pos + n_q;
  const int64_t capw = padded(nk), block = 2 * capw * D;
  thread_local std::vector<float> blocks, qr;
  blocks.assign(size_t(block * n_kv_heads), 0.0f);  // the key padding the tiles read stays zero
  for (int g = 0; g < n_kv_heads; ++g) {
    const uint16_t* src = kv.base + g * kv.head_stride;
    float* kt = blocks.data() + g * block;
    float* v = kt + capw * D;
    for (int d = 0; d < D; ++d)
      for (int j = 0; j < nk; ++j) kt[d * capw + j] = bf16_to_float(src[bf16_k_index(kv.cap, j, d)]);
    for (int j = 0; j < nk; ++j)
      for (int d = 0; d < D; ++d) v[j * D + d] = bf16_to_float(src[bf16_v_index(kv.cap, D, j, d)]);
  }
  qr.resize(size_t(n_q) * size_t(q_stride));
  for (int64_t i = 0; i < int64_t(n_q) * q_stride; ++i) qr[size_t(i)] = kernels::bf16_round_value(q[i]);
  const ops::AttnLayout layout{blocks.data(), blocks.data() + capw * D, capw, D, block};
  if (softcap > 0 || window > 0 || sinks)
    return ops::attention_masked(qr.data(), q_stride, n_q, first_pos, n_heads, n_kv_heads, D, scale, softcap, window,
                                 layout, out, out_stride, sinks);
  ops::attention(qr.data(), q_stride, n_q, first_pos, n_heads, n_kv_heads, D, scale, layout, out, out_stride);
}

}  // namespace

void attention_bf16(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads, int D,
                    float scale, const Bf16Layout& kv, float* out, int64_t out_stride, float softcap, int window,
                    const float* sinks) {
  const bool plain = softcap <= 0 && window <= 0 && !sinks;
  // The tiles where VDPBF16PS is the fast dot (Zen 4: twice the fp32 FMA's flops); the Xeons with
  // AMX issue it at a third of the FMA rate (results/bench.md, `bench --peak`), so there the fp32
  // kernels on the widened values are faster.
  const bool fast_dot = kernel_level() == KernelLevel::AVX512 && cpu_features().avx512_bf16 && !cpu_features().amx_bf16;
  if (plain && D % 16 == 0 && fast_dot)
    return attention_tiles(q, q_stride, n_q, first_pos, n_heads, n_kv_heads, D, scale, kv, out, out_stride);
  attention_widened(q, q_stride, n_q, first_pos, n_heads, n_kv_heads, D, scale, kv, out, out_stride, softcap, window,
                    sinks);
}

void attention_bf16_ref(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads, int D,
                        float scale, const Bf16Layout& kv, float* out, int64_t out_stride) {
  const int group = n_heads / n_kv_heads;
  std::vector<double> s, o(static_cast<size_t>(D));
  for (int i = 0; i < n_q; ++i) {
    const int len = first_pos + i + 1;
    s.assign(size_t(len), 0.0);
    for (int h = 0; h < n_heads; ++h) {
      const float* qh = q + i * q_stride + int64_t(h) * D;
      const uint16_t* src = kv.base + (h / group) * kv.head_stride;
      double mx = -INFINITY;
      for (int j = 0; j < len; ++j) {
        double acc = 0;
        for (int d = 0; d < D; ++d)
          acc += double(kernels::bf16_round_value(qh[d])) * bf16_to_float(src[bf16_k_index(kv.cap, j, d)]);
        s[size_t(j)] = acc;
        mx = std::max(mx, acc);
      }
      double sum = 0;
      for (int j = 0; j < len; ++j) {
        const float p = kernels::bf16_round_value(float(std::exp((s[size_t(j)] - mx) * scale)));
        s[size_t(j)] = p;
        sum += p;
      }
      std::fill(o.begin(), o.end(), 0.0);
      for (int j = 0; j < len; ++j)
        for (int d = 0; d < D; ++d) o[size_t(d)] += s[size_t(j)] * bf16_to_float(src[bf16_v_index(kv.cap, D, j, d)]);
      float* oh = out + i * out_stride + int64_t(h) * D;
      for (int d = 0; d < D; ++d) oh[d] = float(o[size_t(d)] / sum);
    }
  }
}

}  // namespace qt::kv
