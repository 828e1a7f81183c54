// Symmetric int4 with zero point 8 (W4A8), Cider's convention (its README's "Symmetric INT4
// (zp=8)"; cider.ops.pack_weight_int4; docs/spec/int8-w8a8.md), per output channel (group 0) or
// per group of 128 columns:
//   s = absmax/7 in fp32 (a group of zeros gets s = 1)
//   u = clamp(rint(w/s) + 8, 0, 15)     rint = np.round, half to even; fp32 division
//   so u ∈ [1, 15] (signed −7..7; code 0 = −8 is never produced, unlike GPTQ's grid
//   s = 2·absmax/15 that uses all 16 codes — files must say which grid they use; ours is this one)
//   byte i of a row = u[2i] << 4 | u[2i+1]    (high nibble = even column, as Cider)
//   dequantize: w = (u − 8)·s in fp32. Scales fp32 [rows, n_groups].
// Cider stores the packed bytes as [K/2, N] for W given as [K, N] (column-major in our terms);
// we keep the HF row-major [N, K/2] so one output channel's codes are contiguous.
#include <algorithm>
#include <cmath>

#include "libquant/schemes/detail.h"

namespace qt::schemes_detail {
namespace {

PackedLayout int4_layout(const SchemeParams& p, int64_t rows, int64_t cols) {
  PackedLayout l;
  l.data = {DType::U8, {rows, cols / 2}};
  l.scales = {DType::F32, {rows, n_groups(p, cols)}};
  return l;
}

// The stored code u = q + 8 of x: clamp(rint(x/s) + 8, 0, 15).
inline float int4_code(float x, float s) { return cider_code(x, s, -8.0f, 7.0f) + 8.0f; }

PackedTensor int4_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p) {
  PackedLayout l = int4_layout(p, rows, cols);
  OutTensor data(l.data), scales(l.scales);
  uint8_t* out = data.as<uint8_t>();
  symmetric_groups(
      w, rows, cols, p, scales, [](float absmax) { return cider_scale(absmax, 7.0f); },
      [&](const float* v, int64_t n, float s, int64_t at) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = at + i;  // cols and group lengths are even: pairs never straddle groups
          const float u = int4_code(v[i], s);
          out[k / 2] |= (k % 2 == 0) ? uint8_t(uint8_t(u) << 4) : uint8_t(u);
        }
      });
  return finish_packed(p, rows, cols, data, scales);
}

void int4_dequantize(const PackedTensor& t, float* out) {
  const int64_t ng = n_groups(t.params, t.cols), gl = group_len(t.params, t.cols);
  const uint8_t* in = t.data.data;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t k = 0; k < t.cols; ++k) {
      uint8_t b = in[r * (t.cols / 2) + k / 2];
      int u = (k % 2 == 0) ? (b >> 4) : (b & 15);
      float s = t.scales.as<float>()[r * ng + k / gl];
      out[r * t.cols + k] = float(u - 8) * s;
    }
}

GroupParams int4_fit_rtn(const float* v, int64_t n, const SchemeParams&) {
  return {cider_scale(span_absmax(v, n), 7.0f), 0.0f};
}
int int4_grid_code(float x, const GroupParams& g, const SchemeParams&) { return int(int4_code(x, g.scale)) - 8; }
float int4_value(int q, const GroupParams& g, const SchemeParams&) { return float(q) * g.scale; }
void int4_pack_row(const int16_t* q, int64_t cols, const SchemeParams&, uint8_t* dst) {
  for (int64_t j = 0; j < cols; j += 2) dst[j / 2] = uint8_t((q[j] + 8) << 4 | (q[j + 1] + 8));
}

}  // namespace

const Scheme kInt4 = {
    .name = "int4",
    .summary =
        "W4A8 symmetric int4, zero point 8 (Cider): scale absmax/7 fp32 per channel or group 128; "
        "int8 activations",
    .bits = {4},
    .group_sizes = {0, 128},
    .default_bits = 4,
    .default_group_size = 0,
    .flat_blocks = false,
    .col_align = 2,  // two columns a byte
    .kernel = KernelFamily::Int8PerToken,
    .kernel_form = nullptr,
    .grid = {GridKind::Symmetric, -8, 7, 7.0f, nullptr, int4_fit_rtn, int4_grid_code, int4_value, int4_pack_row},
    .layouts = {{"native"}},
    .gguf = {{0, "q4_0"}},
    .layout = int4_layout,
    .quantize = int4_quantize,
    .dequantize = int4_dequantize,
};

}  // namespace qt::schemes_detail
