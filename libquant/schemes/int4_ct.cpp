// int4_ct — compressed-tensors' W4A16 "pack-quantized" weights (llm-compressor's W4A16 preset, the
// 4-bit layout vLLM loads; docs/spec/compressed-tensors.md §W4A16), per group of 32/64/128
// columns, all arithmetic in the weights' dtype T as for int8_ct (int8.cpp):
//   s = T(absmax / 7.5)   ((qmax − qmin)/2 with qmin = −8, qmax = 7); s == 0 → eps(T)
//   q = rint(clamp(T(w/s), −8, 7))
//   stored: u = q + 8, eight to an int32, element j at bits 4·(j mod 8) of word j/8 (compressed-
//   tensors' pack_to_int32: LSB first — the same bits as mlx's 4-bit stream); weight_scale T
//   [rows, cols/group]. Dequantize: T(q·s).
// Weight-only (activations stay float): the kernels are affine's, with bias −8·s (exact: s·u −
// 8·s = s·(u − 8), every product of a bf16 scale and a 4-bit code being exact in fp32).
#include <algorithm>
#include <cmath>

#include "libquant/schemes/detail.h"

namespace qt::schemes_detail {
namespace {

PackedLayout int4_ct_layout(const SchemeParams& p, int64_t rows, int64_t cols) {
  PackedLayout l;
  l.data = {DType::I32, {rows, cols / 8}};
  l.scales = {p.dtype, {rows, n_groups(p, cols)}};
  return l;
}

__attribute__((target_clones("avx2", "default")))
void int4_ct_codes(const float* v, int64_t n, float s, DType T, uint32_t* words) {
  for (int64_t j = 0; j < n; j += 8) {
    uint32_t w = 0;
    for (int k = 0; k < 8; ++k) {
      float x = round_to(T, v[j + k] / s);
      x = std::min(std::max(x, -8.0f), 7.0f);
      w |= uint32_t(int(std::rint(x)) + 8) << (4 * k);
    }
    words[j / 8] = w;
  }
}

PackedTensor int4_ct_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p) {
  PackedLayout l = int4_ct_layout(p, rows, cols);
  OutTensor data(l.data), scales(l.scales);
  uint32_t* q = data.as<uint32_t>();
  ct_symmetric_groups(w, rows, cols, p, 7.5f, scales,
                      [&](const float* v, int64_t n, float s, int64_t at) { int4_ct_codes(v, n, s, p.dtype, q + at / 8); });
  return finish_packed(p, rows, cols, data, scales);
}

void int4_ct_dequantize(const PackedTensor& t, float* out) {
  const int64_t ng = n_groups(t.params, t.cols), gl = group_len(t.params, t.cols);
  const uint32_t* q = t.data.as<uint32_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t k = 0; k < t.cols; ++k) {
      const int64_t i = r * t.cols + k;
      const int u = int(q[i / 8] >> (4 * (i % 8))) & 15;
      out[i] = round_to(t.params.dtype, float(u - 8) * load_float(t.scales, size_t(r * ng + k / gl)));
    }
}

}  // namespace

const Scheme kInt4Ct = {
    "int4_ct",
    "W4A16 symmetric int4 as compressed-tensors packs it (pack-quantized, for vLLM): scale "
    "absmax/7.5 in the weights' dtype per group; weight-only",
    {4},
    {32, 64, 128},
    4,
    128,
    false,
    false,
    int4_ct_layout,
    int4_ct_quantize,
    int4_ct_dequantize,
};

}  // namespace qt::schemes_detail
