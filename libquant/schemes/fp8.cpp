// FP8 E4M3 weights as compressed-tensors 0.20 computes them for llm-compressor's FP8_DYNAMIC preset
// (calculate_qparams with type "float", num_bits 8, strategy "channel", and the float-quantized
// compressor; docs/spec/compressed-tensors.md §FP8), all arithmetic in the weights' dtype T:
//   s = T(absmax / 448)   ((q_max − q_min)/2 with the E4M3 range ±448); s == 0 → eps(T)
//   code = e4m3(clamp(T(w/s), −448, 448))   (the quotient rounded to T first, as torch computes
//   it, then torch's float8_e4m3fn cast: e4m3.h)
//   weight F8_E4M3 [rows, cols]; weight_scale T [rows, 1]. Dequantize: T(e4m3_value(code)·s).
// Activations: dynamic per token, E4M3 with s_x = absmax/448 (quantize_activations_fp8).
#include <algorithm>
#include <cmath>

#include "libquant/schemes/detail.h"
#include "libquant/schemes/e4m3.h"

namespace qt {

namespace {
// out[i] = e4m3(clamp(v[i]/s, ±448)), cloned so that the division and rounding vectorize.
__attribute__((target_clones("avx512f", "avx2", "default"))) void fp8_codes_f32(const float* v, int64_t n, float s,
                                                                                float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float y = v[i] / s + 0.0f;  // + the zero point, as fp8_code
    y = y < -448.0f ? -448.0f : y;
    out[i] = e4m3_round(y > 448.0f ? 448.0f : y);
  }
}
}  // namespace

float quantize_token_fp8(const float* x, int64_t k, float* q) {
  float s = schemes_detail::span_absmax(x, k) / 448.0f;
  if (s == 0.0f) s = schemes_detail::dtype_eps(DType::F32);
  fp8_codes_f32(x, k, s, q);
  return s;
}

void quantize_activations_fp8(const float* x, int64_t n_tokens, int64_t k, float* q, float* scales) {
#pragma omp parallel for schedule(static) if (n_tokens * k > (1 << 15))
  for (int64_t t = 0; t < n_tokens; ++t) scales[t] = quantize_token_fp8(x + t * k, k, q + t * k);
}

namespace schemes_detail {

float fp8_value(int code, float s, DType T) { return round_to(T, e4m3_to_f32(uint8_t(code)) * s); }

// The quotient plus the zero point compressed-tensors always passes (zeros for a symmetric
// scheme: llm-compressor initializes one, force_zero_point): −0 becomes +0 before the cast.
uint8_t fp8_code(float x, float s, DType T) {
  float y = round_to(T, x / s) + 0.0f;
  y = y < -448.0f ? -448.0f : y;
  return e4m3_from_f32(y > 448.0f ? 448.0f : y);
}

namespace {

PackedLayout fp8_layout(const SchemeParams& p, int64_t rows, int64_t cols) {
  PackedLayout l;
  l.data = {DType::F8_E4M3, {rows, cols}};
  l.scales = {p.dtype, {rows, n_groups(p, cols)}};
  return l;
}

PackedTensor fp8_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p) {
  PackedLayout l = fp8_layout(p, rows, cols);
  OutTensor data(l.data), scales(l.scales);
  uint8_t* q = data.as<uint8_t>();
  ct_symmetric_groups(w, rows, cols, p, 448.0f, scales, [&](const float* v, int64_t n, float s, int64_t at) {
    if (p.dtype == DType::F32) {  // one loop per dtype: the rounding's switch outside the loop
      for (int64_t i = 0; i < n; ++i) q[at + i] = fp8_code(v[i], s, DType::F32);
    } else {
      for (int64_t i = 0; i < n; ++i) q[at + i] = fp8_code(v[i], s, p.dtype);
    }
  });
  return finish_packed(p, rows, cols, data, scales);
}

void fp8_dequantize(const PackedTensor& t, float* out) {
  const int64_t ng = n_groups(t.params, t.cols), gl = group_len(t.params, t.cols);
  const uint8_t* q = t.data.as<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const float s = load_float(t.scales, size_t(r * ng + g));
      for (int64_t i = 0; i < gl; ++i) {
        const int64_t k = r * t.cols + g * gl + i;
        out[k] = fp8_value(q[k], s, t.params.dtype);
      }
    }
}

GroupParams fp8_fit_rtn(const float* v, int64_t n, const SchemeParams& p) {
  return {ct_scale(span_absmax(v, n), 448.0f, p.dtype), 0.0f};
}
int fp8_grid_code(float x, const GroupParams& g, const SchemeParams& p) { return fp8_code(x, g.scale, p.dtype); }
float fp8_grid_value(int q, const GroupParams& g, const SchemeParams& p) { return fp8_value(q, g.scale, p.dtype); }
void fp8_pack_row(const int16_t* q, int64_t cols, const SchemeParams&, uint8_t* dst) {
  for (int64_t j = 0; j < cols; ++j) dst[j] = uint8_t(q[j]);
}

}  // namespace

const Scheme kFp8 = {
    .name = "fp8",
    .summary =
        "FP8 E4M3 (compressed-tensors FP8_DYNAMIC): scale absmax/448 per channel in the weights' dtype; "
        "E4M3 activations per token",
    .bits = {8},
    .group_sizes = {0},
    .default_bits = 8,
    .default_group_size = 0,
    .flat_blocks = false,
    .col_align = 1,
    .kernel = KernelFamily::Fp8PerToken,
    .kernel_form = nullptr,
    .grid = {GridKind::Float, 0, 255, 448.0f, nullptr, fp8_fit_rtn, fp8_grid_code, fp8_grid_value, fp8_pack_row},
    .layouts = {{"compressed-tensors"}, {"native"}},
    .gguf = {{0, "q8_0"}},
    .layout = fp8_layout,
    .quantize = fp8_quantize,
    .dequantize = fp8_dequantize,
};

}  // namespace schemes_detail
}  // namespace qt
