// NVFP4 as compressed-tensors 0.20 computes it for llm-compressor's NVFP4A16 / NVFP4 presets
// (strategy "tensor_group", group 16, E4M3 scales, format nvfp4-pack-quantized), in the weights'
// dtype T where the package computes in it:
//   global  gs = fp32(T(T(1/max(absmax, tiny)) · 448·6))  over the whole weight (generate_gparam;
//           torch computes 2688/x as reciprocal times 2688); a non-finite gs is 1
//   scale   e = e4m3(clamp(gs · T(absmax_g / 6), ±448)) in fp32 (calculate_qparams with the global
//           scale; e == 0 → 0.125, E4M3's eps there); stored as the E4M3 byte (weight_scale)
//   code    e2m1(clamp(x / fp32(e / gs), ±6)) (quantize_and_pack_fp4's CPU path; e2m1.h)
//   value   bf16(e2m1 · fp32(e / gs)): the package's decompress unpacks to bf16 whatever T was.
// The weight's own absmax gives gs, as llm-compressor's weight observer does. convert then
// makes the q/k/v and gate/up projections share the smallest of their global scales for vLLM's
// fused layers, as llm-compressor does (calib/fused_global_scale.h); a shared gs arrives in
// SchemeParams::global_scale.
// Calibrated quantizers (--imatrix, GPTQ with it) try every E4M3 scale that puts the block max
// between 3 and 9 of E2M1's ±6 (nvfp4_scale_candidates): the rounding of the scale to E4M3 is
// then part of the search, and the block max may map to 4 instead of 6 (the grid's 1.5 step
// at the top becomes a 1 step), "Four Over Six" (arXiv 2512.02010). --imatrix alone also
// searches the global scale (calib/fused_global_scale.h).
// Activations (nvfp4_a4, the NVFP4 preset's input_activations: E2M1 per 16 with E4M3 scales,
// dynamic per group, static global input scale from calibration): the package stores
// input_global_scale = 2688/absmax observed over calibration data. Without calibration this row
// takes each token's own absmax for it (the same formula over one token), so a token's rounding
// does not depend on the batch it runs in.
#include <algorithm>
#include <cmath>
#include <limits>

#include "libquant/schemes/detail.h"
#include "libquant/schemes/e2m1.h"
#include "libquant/schemes/e4m3.h"

namespace qt {

namespace {

constexpr int kNvfp4Group = 16;

// generate_gparam for a tensor whose absmax (as T) is amax.
float global_scale_of(float amax, DType T) {
  amax = std::max(amax, std::numeric_limits<float>::min());
  const float gs = schemes_detail::round_to(T, schemes_detail::round_to(T, 1.0f / amax) * 2688.0f);
  return std::isfinite(gs) ? gs : 1.0f;
}

// The E4M3 value of a group scale: e4m3(clamp(v, ±448)), 0 → 0.125.
float e4m3_scale(float v) {
  v = v < -448.0f ? -448.0f : v;
  const float e = e4m3_round(v > 448.0f ? 448.0f : v);
  return e == 0.0f ? 0.125f : e;
}

// The effective scale of a group of n values (T-rounded) under global scale gs.
float group_scale(float amax, float gs, DType T) {
  return e4m3_scale(gs * schemes_detail::round_to(T, amax / 6.0f)) / gs;
}

}  // namespace

void round_activations_nvfp4(float* x, int64_t n_tokens, int64_t k) {
#pragma omp parallel for schedule(static) if (n_tokens * k > (1 << 15))
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* row = x + t * k;
    const float gs = global_scale_of(schemes_detail::span_absmax(row, k), DType::F32);
    for (int64_t g = 0; g + kNvfp4Group <= k; g += kNvfp4Group) {
      float* v = row + g;
      const float s = group_scale(schemes_detail::span_absmax(v, kNvfp4Group), gs, DType::F32);
      for (int i = 0; i < kNvfp4Group; ++i) v[i] = kE2M1Values[e2m1_code_clamped(v[i] / s)] * s;
    }
  }
}

namespace schemes_detail {

namespace {

float nvfp4_tensor_scale(const float* w, int64_t n, const SchemeParams& p) {
  return global_scale_of(round_to(p.dtype, span_absmax(w, n)), p.dtype);
}
float bound_global(const SchemeParams& p) { return p.global_scale > 0.0f ? p.global_scale : 1.0f; }

PackedLayout nvfp4_layout(const SchemeParams&, int64_t rows, int64_t cols) {
  PackedLayout l;
  l.data = {DType::U8, {rows, cols / 2}};
  l.scales = {DType::F8_E4M3, {rows, cols / kNvfp4Group}};
  l.biases = TensorSpec{DType::F32, {1}};
  return l;
}

GroupParams nvfp4_fit_rtn(const float* v, int64_t n, const SchemeParams& p) {
  return {group_scale(span_absmax(v, n), bound_global(p), p.dtype), 0.0f};
}
GroupParams nvfp4_store(const GroupParams& g, const SchemeParams& p) {
  const float gs = bound_global(p);
  return {e4m3_scale(g.scale * gs) / gs, 0.0f};
}
uint8_t nvfp4_scale_byte(const GroupParams& g, const SchemeParams& p) {
  return e4m3_from_f32(e4m3_scale(g.scale * bound_global(p)));
}
int nvfp4_code(float x, const GroupParams& g, const SchemeParams&) { return e2m1_code_clamped(x / g.scale); }
float nvfp4_value(int q, const GroupParams& g, const SchemeParams&) {
  return round_to(DType::BF16, kE2M1Values[q & 15] * g.scale);
}
// Every E4M3 scale code from the nearest of gs·amax/9 to the nearest of gs·amax/3 (at most
// 448), as effective scales e/gs, ascending. The block max then lands between 3 and 9 (clipped to
// 6): 6 is the package's RTN choice, 4 Four Over Six's alternative, 9 reaches below the 0.7·RTN
// end of the factor sweep the other float rows use.
int nvfp4_scale_candidates(float amax, const SchemeParams& p, GroupParams* out, int cap) {
  const float gs = bound_global(p);
  auto code_of = [&](float v) { return int(e4m3_from_f32(std::min(v, 448.0f))); };
  const int lo = std::max(1, code_of(gs * amax / 9.0f)), hi = code_of(gs * amax / 3.0f);
  int n = 0;
  for (int c = lo; c <= hi && n < cap; ++c) out[n++] = {e4m3_to_f32(uint8_t(c)) / gs, 0.0f};
  return n;
}
void nvfp4_pack_row(const int16_t* q, int64_t cols, const SchemeParams&, uint8_t* dst) { e2m1_pack_row(q, cols, dst); }

PackedTensor nvfp4_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p0) {
  SchemeParams p = p0;
  if (p.global_scale <= 0.0f) p.global_scale = nvfp4_tensor_scale(w, rows * cols, p);
  const PackedLayout l = nvfp4_layout(p, rows, cols);
  OutTensor data(l.data), scales(l.scales), global(*l.biases);
  uint8_t* q = data.as<uint8_t>();
  uint8_t* sb = scales.as<uint8_t>();
  const int64_t ng = cols / kNvfp4Group;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int16_t codes[kNvfp4Group];
    for (int64_t g = 0; g < ng; ++g) {
      const float* v = w + r * cols + g * kNvfp4Group;
      const GroupParams gp = nvfp4_fit_rtn(v, kNvfp4Group, p);
      for (int i = 0; i < kNvfp4Group; ++i) codes[i] = int16_t(e2m1_code_clamped(v[i] / gp.scale));
      e2m1_pack_row(codes, kNvfp4Group, q + r * (cols / 2) + g * (kNvfp4Group / 2));
      sb[r * ng + g] = nvfp4_scale_byte(gp, p);
    }
  }
  global.as<float>()[0] = p.global_scale;
  PackedTensor t = finish_packed(p0, rows, cols, data, scales, &global);
  t.params.global_scale = 0.0f;  // the stored tensor carries it
  return t;
}

void nvfp4_dequantize(const PackedTensor& t, float* out) {
  const int64_t ng = t.cols / kNvfp4Group;
  const float gs = t.biases.as<float>()[0];
  const uint8_t* q = t.data.as<uint8_t>();
  const uint8_t* sb = t.scales.as<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const float s = e4m3_to_f32(sb[r * ng + g]) / gs;
      for (int64_t j = g * kNvfp4Group; j < (g + 1) * kNvfp4Group; ++j)
        out[r * t.cols + j] = round_to(DType::BF16, kE2M1Values[e2m1_unpack(q + r * (t.cols / 2), j)] * s);
    }
}

Scheme nvfp4_row(const char* name, const char* summary, void (*acts)(float*, int64_t, int64_t)) {
  return {
      .name = name,
      .summary = summary,
      .bits = {4},
      .group_sizes = {kNvfp4Group},
      .default_bits = 4,
      .default_group_size = kNvfp4Group,
      .flat_blocks = false,
      .col_align = 2,
      .kernel = KernelFamily::Dequantized,
      .kernel_form = nullptr,
      .grid = {GridKind::Float, 0, 15, 6.0f, nullptr, nvfp4_fit_rtn, nvfp4_code, nvfp4_value, nvfp4_pack_row,
               nvfp4_store, nvfp4_scale_byte, nvfp4_scale_candidates},
      .layouts = {{"compressed-tensors"}, {"native"}},
      .gguf = {{0, "iq4_nl"}},
      .layout = nvfp4_layout,
      .quantize = nvfp4_quantize,
      .dequantize = nvfp4_dequantize,
      .tensor_scale = nvfp4_tensor_scale,
      .round_activations = acts,
  };
}

}  // namespace

const Scheme kNvfp4 = nvfp4_row(
    "nvfp4",
    "NVFP4 (compressed-tensors NVFP4A16): E2M1, an E4M3 scale per 16 columns, an FP32 global scale per tensor; "
    "weight-only",
    nullptr);
const Scheme kNvfp4A4 = nvfp4_row(
    "nvfp4_a4",
    "NVFP4 weights as nvfp4, activations E2M1 per 16 with E4M3 scales (compressed-tensors NVFP4; global scale "
    "per token)",
    round_activations_nvfp4);

}  // namespace schemes_detail
}  // namespace qt
