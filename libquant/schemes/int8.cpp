// Symmetric int8 weights (W8A8) in two conventions, and the per-token int8 activation quantizer.
//
// int8 — Cider (cider.ops.quantize_weight_int8, cider.nn._symmetric_quantize_pergroup;
// docs/spec/int8-w8a8.md), per output channel (group 0) or per group of 64/128 columns:
//   s = absmax/127 in fp32 (a group of zeros gets s = 1); q = clamp(rint(w/s), −128, 127)
//   (numpy's np.round: half to even; fp32 division, not a multiply by 1/s). |w/s| ≤ 127, so −128
//   never occurs. Scales fp32 [rows, n_groups]. Dequantize: w = q·s in fp32.
//
// int8_ct — compressed-tensors 0.20 (calculate_qparams + the int-quantized compressor of the W8A8
// preset; docs/spec/compressed-tensors.md §W8A8), all arithmetic in the weights' dtype T
// (torch computes each op in fp32 and rounds the result to T):
//   s = T(absmax / 127.5)   ((qmax − qmin)/2 with qmin = −128, qmax = 127); s == 0 → eps(T)
//   q = rint(clamp(T(w/s), −128, 127))   (clamp first, then torch.round: half to even; the
//   quotient is rounded to T before rint — a double rounding for bf16/f16, kept for bit-exactness)
//   weight_scale T [rows, 1] per channel, [rows, cols/group] per group. Dequantize: T(q·s).
//   Since absmax/s ≈ 127.5, the largest weight lands on ±127.5 → rint → 128 → clamped to 127
//   (or −128 for a negative extreme).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "libquant/cpu_features.h"
#include "libquant/schemes/detail.h"

namespace qt {

void quantize_activations_int8(const float* x, int64_t n_tokens, int64_t k, int8_t* q, float* scales) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = x + t * k;
    float amax = 0.0f;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::abs(row[i]));
    float s = amax / 127.0f;
    if (s == 0.0f) s = 1.0f;
    float inv = 1.0f / s;
    for (int64_t i = 0; i < k; ++i) {
      float v = std::rint(row[i] * inv);
      q[t * k + i] = int8_t(std::min(std::max(v, -128.0f), 127.0f));
    }
    scales[t] = s;
  }
}

namespace schemes_detail {
namespace {

PackedLayout int8_layout(const SchemeParams& p, int64_t rows, int64_t cols) {
  PackedLayout l;
  l.data = {DType::I8, {rows, cols}};
  l.scales = {DType::F32, {rows, n_groups(p, cols)}};
  return l;
}

PackedLayout int8_ct_layout(const SchemeParams& p, int64_t rows, int64_t cols) {
  PackedLayout l = int8_layout(p, rows, cols);
  l.scales.dtype = p.dtype;
  return l;
}

// The per-group loops below are cloned for AVX2 (the library is built for the baseline ISA and
// convert runs them over every weight): the same IEEE operations per element, so both clones
// give the same bits.

// Cider: q = clamp(rint(v / s), -128, 127).
__attribute__((target_clones("avx2", "default"))) void int8_codes(const float* v, int64_t n, float s, int8_t* q) {
  for (int64_t i = 0; i < n; ++i) q[i] = int8_t(cider_code(v[i], s, -128.0f, 127.0f));
}

// compressed-tensors: q = rint(clamp(T(v / s), -128, 127)), the quotient rounded to T first.
__attribute__((target_clones("avx2", "default"))) void int8_ct_codes_loop(const float* v, int64_t n, float s, DType T,
                                                                          int8_t* q) {
  // One loop per dtype, so that the rounding's switch is resolved outside the loop.
  if (T == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) q[i] = int8_t(ct_code(v[i], s, DType::BF16, -128.0f, 127.0f));
  } else if (T == DType::F32) {
    for (int64_t i = 0; i < n; ++i) q[i] = int8_t(ct_code(v[i], s, DType::F32, -128.0f, 127.0f));
  } else {
    for (int64_t i = 0; i < n; ++i) q[i] = int8_t(ct_code(v[i], s, T, -128.0f, 127.0f));
  }
}

// The same codes for bf16 and fp32, 32 at a time with AVX2 intrinsics: the compiler leaves the
// clone above scalar (the bf16 rounding's NaN branch), and it was a fifth of an 8B int8 convert's
// CPU time (perf). Same IEEE operations per element: the division, bf16 round-to-nearest-even by
// the integer carry (quotients are finite: |v| <= absmax and s > 0), clamp, rint.
// tests/test_schemes.cpp compares it with the loop at every kernel level.
__attribute__((target("avx2"))) void int8_ct_codes_avx2(const float* v, int64_t n, float s, bool bf16, int8_t* q) {
  const __m256 vs = _mm256_set1_ps(s), lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1),
                keep = _mm256_set1_epi32(int(0xffff0000u));
  const __m256i fix = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undo the packs' lane interleave
  const int64_t full = n / 32 * 32;
  for (int64_t i = 0; i < full; i += 32) {
    __m256i c[4];
    for (int j = 0; j < 4; ++j) {
      __m256 x = _mm256_div_ps(_mm256_loadu_ps(v + i + 8 * j), vs);
      if (bf16) {
        __m256i u = _mm256_castps_si256(x);
        u = _mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
        x = _mm256_castsi256_ps(_mm256_and_si256(u, keep));
      }
      x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
      c[j] = _mm256_cvtps_epi32(_mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), _mm256_permutevar8x32_epi32(b, fix));
  }
  if (full < n) int8_ct_codes_loop(v + full, n - full, s, bf16 ? DType::BF16 : DType::F32, q + full);
}

void int8_ct_codes(const float* v, int64_t n, float s, DType T, int8_t* q) {
  if ((T == DType::BF16 || T == DType::F32) && kernel_level() >= KernelLevel::AVX2)
    int8_ct_codes_avx2(v, n, s, T == DType::BF16, q);
  else
    int8_ct_codes_loop(v, n, s, T, q);
}

PackedTensor int8_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p) {
  PackedLayout l = int8_layout(p, rows, cols);
  OutTensor data(l.data), scales(l.scales);
  int8_t* q = data.as<int8_t>();
  symmetric_groups(
      w, rows, cols, p, scales, [](float absmax) { return cider_scale(absmax, 127.0f); },
      [&](const float* v, int64_t n, float s, int64_t at) { int8_codes(v, n, s, q + at); });
  return finish_packed(p, rows, cols, data, scales);
}

void int8_dequantize(const PackedTensor& t, float* out) {
  const int64_t ng = n_groups(t.params, t.cols), gl = group_len(t.params, t.cols);
  const int8_t* q = t.data.as<int8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      float s = t.scales.as<float>()[r * ng + g];
      for (int64_t i = 0; i < gl; ++i) {
        int64_t k = r * t.cols + g * gl + i;
        out[k] = float(q[k]) * s;
      }
    }
}

PackedTensor int8_ct_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p) {
  PackedLayout l = int8_ct_layout(p, rows, cols);
  OutTensor data(l.data), scales(l.scales);
  int8_t* q = data.as<int8_t>();
  ct_symmetric_groups(w, rows, cols, p, 127.5f, scales,
                      [&](const float* v, int64_t n, float s, int64_t at) { int8_ct_codes(v, n, s, p.dtype, q + at); });
  return finish_packed(p, rows, cols, data, scales);
}

void int8_ct_dequantize(const PackedTensor& t, float* out) {
  const int64_t ng = n_groups(t.params, t.cols), gl = group_len(t.params, t.cols);
  const int8_t* q = t.data.as<int8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      float s = load_float(t.scales, size_t(r * ng + g));
      for (int64_t i = 0; i < gl; ++i) {
        int64_t k = r * t.cols + g * gl + i;
        out[k] = ct_value(q[k], s, t.params.dtype);
      }
    }
}

// The GridRule steps of both rows.
GroupParams int8_fit_rtn(const float* v, int64_t n, const SchemeParams&) {
  return {cider_scale(span_absmax(v, n), 127.0f), 0.0f};
}
int int8_grid_code(float x, const GroupParams& g, const SchemeParams&) {
  return int(cider_code(x, g.scale, -128.0f, 127.0f));
}
float int8_value(int q, const GroupParams& g, const SchemeParams&) { return float(q) * g.scale; }
GroupParams int8_ct_fit_rtn(const float* v, int64_t n, const SchemeParams& p) {
  return {ct_scale(span_absmax(v, n), 127.5f, p.dtype), 0.0f};
}
int int8_ct_grid_code(float x, const GroupParams& g, const SchemeParams& p) {
  return int(ct_code(x, g.scale, p.dtype, -128.0f, 127.0f));
}
float int8_ct_value(int q, const GroupParams& g, const SchemeParams& p) { return ct_value(q, g.scale, p.dtype); }
void int8_pack_row(const int16_t* q, int64_t cols, const SchemeParams&, uint8_t* dst) {
  for (int64_t j = 0; j < cols; ++j) reinterpret_cast<int8_t*>(dst)[j] = int8_t(q[j]);
}

}  // namespace

const Scheme kInt8 = {
    .name = "int8",
    .summary = "W8A8 symmetric int8 (Cider): scale absmax/127 fp32 per channel or group; int8 activations",
    .bits = {8},
    .group_sizes = {0, 64, 128},
    .default_bits = 8,
    .default_group_size = 0,
    .flat_blocks = false,
    .col_align = 1,
    .kernel = KernelFamily::Int8PerToken,
    .kernel_form = nullptr,
    .grid = {GridKind::Symmetric, -128, 127, 127.0f, nullptr, int8_fit_rtn, int8_grid_code, int8_value, int8_pack_row},
    // compressed-tensors computes int8 its own way: stored there as the int8_ct row.
    .layouts = {{"compressed-tensors", "int8_ct"}, {"native"}},
    .gguf = {{0, "q8_0"}},
    .layout = int8_layout,
    .quantize = int8_quantize,
    .dequantize = int8_dequantize,
};

// int8's row but for how compressed-tensors computes the scale and the codes.
const Scheme kInt8Ct = [] {
  Scheme s = kInt8;
  s.name = "int8_ct";
  s.summary = "W8A8 symmetric int8 as compressed-tensors computes it: scale absmax/127.5 in the weights' dtype";
  s.grid.top = 127.5f;  // same code range and packing
  s.grid.fit_rtn = int8_ct_fit_rtn;
  s.grid.code = int8_ct_grid_code;
  s.grid.value = int8_ct_value;
  s.layouts = {{"compressed-tensors"}, {"native"}};
  s.layout = int8_ct_layout;
  s.quantize = int8_ct_quantize;
  s.dequantize = int8_ct_dequantize;
  return s;
}();

}  // namespace schemes_detail
}  // namespace qt
