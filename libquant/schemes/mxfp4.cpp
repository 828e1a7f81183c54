// MXFP4 as compressed-tensors 0.20 computes it for llm-compressor's MXFP4A16 / MXFP4 presets
// (strategy "group", group 32, uint8 scales, format mxfp4-pack-quantized), in the weights' dtype T:
//   scale  p2 = round_to_power_2(T(absmax)) (the bits of T plus a quarter of the leading mantissa
//          step, masked to sign and exponent: a mantissa ≥ 1.75 rounds up); e = clamp(127 +
//          floor(log2 p2) − 2, 0, 255) (2 = floor(log2 6), generate_mx_scales); s = T(2^(e − 127)),
//          0 → 1 (the uint8 eps). Stored as the E8M0 byte 127 + floor(log2 s) (compress_mx_scale).
//   code   e2m1(clamp(T(x / s), ±6)) (quantize_and_pack_fp4's CPU path; e2m1.h)
//   value  bf16(e2m1 · s) (decompress: bf16 scales and values, whatever T was).
// Activations (mxfp4_a4, the MXFP4 preset: dynamic per group of 32) get the same rule in fp32.
#include <cmath>
#include <cstring>

#include "libquant/schemes/detail.h"
#include "libquant/schemes/e2m1.h"

namespace qt {

namespace {

constexpr int kMxfp4Group = 32;

// The E8M0 exponent byte of a group whose absmax (as T) is amax.
int mx_exponent(float amax, DType T) {
  uint32_t u;
  std::memcpy(&u, &amax, 4);
  // round_to_power_2 on T's bits: add 1 << (mantissa bits − 2), keep sign and exponent.
  int exp2;  // T's biased exponent field after the rounding, as an fp32 one
  switch (T) {
    case DType::BF16: {
      const uint32_t b = ((uint32_t(f32_to_bf16(amax)) + 32u) & 0xff80u) << 16;
      exp2 = int(b >> 23);
      break;
    }
    case DType::F16: {
      const uint32_t h = (uint32_t(f32_to_f16(amax)) + 256u) & 0xfc00u;
      exp2 = h == 0 ? 0 : int(h >> 10) - 15 + 127;
      break;
    }
    default: exp2 = int(((u + (1u << 21)) & 0xff800000u) >> 23); break;
  }
  if (exp2 == 0) return 0;      // log2(0) = −inf, clamped to 0
  if (exp2 >= 255) return 255;  // rounded up to Inf
  const int e = 127 + (exp2 - 127) - 2;
  return e < 0 ? 0 : e > 255 ? 255 : e;
}

float mx_scale(int e, DType T) {
  const float s = schemes_detail::round_to(T, std::ldexp(1.0f, e - 127));
  return s == 0.0f ? 1.0f : s;
}
uint8_t mx_byte(float s) {
  const int e = 127 + std::ilogb(s);
  return uint8_t(e < 0 ? 0 : e > 255 ? 255 : e);
}

}  // namespace

void round_activations_mxfp4(float* x, int64_t n_tokens, int64_t k) {
#pragma omp parallel for schedule(static) if (n_tokens * k > (1 << 15))
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t g = 0; g + kMxfp4Group <= k; g += kMxfp4Group) {
      float* v = x + t * k + g;
      const float s = mx_scale(mx_exponent(schemes_detail::span_absmax(v, kMxfp4Group), DType::F32), DType::F32);
      for (int i = 0; i < kMxfp4Group; ++i) v[i] = kE2M1Values[e2m1_code_clamped(v[i] / s)] * s;
    }
}

namespace schemes_detail {

namespace {

PackedLayout mxfp4_layout(const SchemeParams&, int64_t rows, int64_t cols) {
  PackedLayout l;
  l.data = {DType::U8, {rows, cols / 2}};
  l.scales = {DType::U8, {rows, cols / kMxfp4Group}};
  return l;
}

GroupParams mxfp4_fit_rtn(const float* v, int64_t n, const SchemeParams& p) {
  return {mx_scale(mx_exponent(span_absmax(v, n), p.dtype), p.dtype), 0.0f};
}
// A searched scale as stored: the power of two at or below it (compress_mx_scale's floor).
GroupParams mxfp4_store(const GroupParams& g, const SchemeParams& p) {
  return {mx_scale(mx_byte(g.scale), p.dtype), 0.0f};
}
uint8_t mxfp4_scale_byte(const GroupParams& g, const SchemeParams&) { return mx_byte(g.scale); }
int mxfp4_code(float x, const GroupParams& g, const SchemeParams& p) {
  return e2m1_code_clamped(round_to(p.dtype, x / g.scale));
}
float mxfp4_value(int q, const GroupParams& g, const SchemeParams&) {
  return round_to(DType::BF16, kE2M1Values[q & 15] * g.scale);
}
void mxfp4_pack_row(const int16_t* q, int64_t cols, const SchemeParams&, uint8_t* dst) { e2m1_pack_row(q, cols, dst); }

PackedTensor mxfp4_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p) {
  const PackedLayout l = mxfp4_layout(p, rows, cols);
  OutTensor data(l.data), scales(l.scales);
  uint8_t* q = data.as<uint8_t>();
  uint8_t* sb = scales.as<uint8_t>();
  const int64_t ng = cols / kMxfp4Group;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int16_t codes[kMxfp4Group];
    for (int64_t g = 0; g < ng; ++g) {
      const float* v = w + r * cols + g * kMxfp4Group;
      const GroupParams gp = mxfp4_fit_rtn(v, kMxfp4Group, p);
      for (int i = 0; i < kMxfp4Group; ++i) codes[i] = int16_t(mxfp4_code(v[i], gp, p));
      e2m1_pack_row(codes, kMxfp4Group, q + r * (cols / 2) + g * (kMxfp4Group / 2));
      sb[r * ng + g] = mx_byte(gp.scale);
    }
  }
  return finish_packed(p, rows, cols, data, scales);
}

void mxfp4_dequantize(const PackedTensor& t, float* out) {
  const int64_t ng = t.cols / kMxfp4Group;
  const uint8_t* q = t.data.as<uint8_t>();
  const uint8_t* sb = t.scales.as<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const float s = round_to(DType::BF16, std::ldexp(1.0f, int(sb[r * ng + g]) - 127));
      for (int64_t j = g * kMxfp4Group; j < (g + 1) * kMxfp4Group; ++j)
        out[r * t.cols + j] = round_to(DType::BF16, kE2M1Values[e2m1_unpack(q + r * (t.cols / 2), j)] * s);
    }
}

Scheme mxfp4_row(const char* name, const char* summary, void (*acts)(float*, int64_t, int64_t)) {
  return {
      .name = name,
      .summary = summary,
      .bits = {4},
      .group_sizes = {kMxfp4Group},
      .default_bits = 4,
      .default_group_size = kMxfp4Group,
      .flat_blocks = false,
      .col_align = 2,
      .kernel = KernelFamily::Dequantized,
      .kernel_form = nullptr,
      .grid = {GridKind::Float, 0, 15, 6.0f, nullptr, mxfp4_fit_rtn, mxfp4_code, mxfp4_value, mxfp4_pack_row,
               mxfp4_store, mxfp4_scale_byte},
      .layouts = {{"compressed-tensors"}, {"native"}},
      .gguf = {{0, "iq4_nl"}},
      .layout = mxfp4_layout,
      .quantize = mxfp4_quantize,
      .dequantize = mxfp4_dequantize,
      .tensor_scale = nullptr,
      .round_activations = acts,
  };
}

}  // namespace

const Scheme kMxfp4 = mxfp4_row("mxfp4",
                                "MXFP4 (compressed-tensors MXFP4A16): E2M1, an E8M0 (power of two) scale per 32 "
                                "columns; weight-only",
                                nullptr);
const Scheme kMxfp4A4 = mxfp4_row(
    "mxfp4_a4", "MXFP4 weights as mxfp4, activations E2M1 per 32 (compressed-tensors MXFP4)", round_activations_mxfp4);

}  // namespace schemes_detail
}  // namespace qt
