// int4_ct — compressed-tensors' W4A16 "pack-quantized" weights (llm-compressor's W4A16 preset, the
// 4-bit layout vLLM loads; docs/spec/compressed-tensors.md §W4A16), per group of 32/64/128
// columns, all arithmetic in the weights' dtype T as for int8_ct (int8.cpp):
//   s = T(absmax / 7.5)   ((qmax − qmin)/2 with qmin = −8, qmax = 7); s == 0 → eps(T)
//   q = rint(clamp(T(w/s), −8, 7))
//   stored: u = q + 8, eight to an int32, element j at bits 4·(j mod 8) of word j/8 (compressed-
//   tensors' pack_to_int32: LSB first — the same bits as mlx's 4-bit stream); weight_scale T
//   [rows, cols/group]. Dequantize: T(q·s).
// Weight-only (activations stay float): the kernels are affine's (int4_ct_as_affine below).
#include <algorithm>
#include <cmath>
#include <vector>

#include "libquant/schemes/detail.h"

namespace qt::schemes_detail {
namespace {

PackedLayout int4_ct_layout(const SchemeParams& p, int64_t rows, int64_t cols) {
  PackedLayout l;
  l.data = {DType::I32, {rows, cols / 8}};
  l.scales = {p.dtype, {rows, n_groups(p, cols)}};
  return l;
}

__attribute__((target_clones("avx2", "default"))) void int4_ct_codes(const float* v, int64_t n, float s, DType T,
                                                                     uint32_t* words) {
  for (int64_t j = 0; j < n; j += 8) {
    uint32_t w = 0;
    for (int k = 0; k < 8; ++k) w |= uint32_t(int(ct_code(v[j + k], s, T, -8.0f, 7.0f)) + 8) << (4 * k);
    words[j / 8] = w;
  }
}

PackedTensor int4_ct_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p) {
  PackedLayout l = int4_ct_layout(p, rows, cols);
  OutTensor data(l.data), scales(l.scales);
  uint32_t* q = data.as<uint32_t>();
  ct_symmetric_groups(w, rows, cols, p, 7.5f, scales, [&](const float* v, int64_t n, float s, int64_t at) {
    int4_ct_codes(v, n, s, p.dtype, q + at / 8);
  });
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
      out[i] = ct_value(u - 8, load_float(t.scales, size_t(r * ng + k / gl)), t.params.dtype);
    }
}

GroupParams int4_ct_fit_rtn(const float* v, int64_t n, const SchemeParams& p) {
  return {ct_scale(span_absmax(v, n), 7.5f, p.dtype), 0.0f};
}
int int4_ct_grid_code(float x, const GroupParams& g, const SchemeParams& p) {
  return int(ct_code(x, g.scale, p.dtype, -8.0f, 7.0f));
}
float int4_ct_value(int q, const GroupParams& g, const SchemeParams& p) { return ct_value(q, g.scale, p.dtype); }
void int4_ct_pack_row(const int16_t* q, int64_t cols, const SchemeParams&, uint8_t* dst) {
  uint32_t* words = reinterpret_cast<uint32_t*>(dst);
  for (int64_t j = 0; j < cols; j += 8) {
    uint32_t w = 0;
    for (int k = 0; k < 8; ++k) w |= uint32_t(q[j + k] + 8) << (4 * k);
    words[j / 8] = w;
  }
}

}  // namespace
}  // namespace qt::schemes_detail

namespace qt {

// The codes are mlx's 4-bit stream (u = q + 8, eight to a 32-bit word, LSB first): affine 4-bit
// with fp32 scales s and biases −8·s, the codes used in place. Its weights are the exact products
// s·(u − 8) (a bf16/f16 scale times a 4-bit code is exact in fp32), where compressed-tensors'
// decompress rounds them to the weights' dtype: within half an ulp of it
// (tests/test_packed_linear.cpp). Affine with bf16 scales would not do: like mlx it rounds s·u to
// bf16 before adding the bias.
PackedTensor int4_ct_as_affine(PackedTensor w) {
  const int64_t n = w.scales.numel();
  std::vector<float> s(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    s[size_t(i)] = schemes_detail::load_float(w.scales, size_t(i));
    b[size_t(i)] = -8.0f * s[size_t(i)];
  }
  const std::vector<int64_t> shape = w.scales.shape;
  w.scales = Tensor::from_f32(std::move(s), shape);
  w.biases = Tensor::from_f32(std::move(b), shape);
  w.data.dtype = DType::U32;
  w.params.scheme = schemes_detail::kAffine.name;
  w.params.dtype = DType::F32;
  check_packed(w, "int4_ct as affine");
  return w;
}

}  // namespace qt

namespace qt::schemes_detail {

const Scheme kInt4Ct = {
    .name = "int4_ct",
    .summary =
        "W4A16 symmetric int4 as compressed-tensors packs it (pack-quantized, for vLLM): scale "
        "absmax/7.5 in the weights' dtype per group; weight-only",
    .bits = {4},
    .group_sizes = {32, 64, 128},
    .default_bits = 4,
    .default_group_size = 128,
    .flat_blocks = false,
    .col_align = 1,  // groups of 32/64/128 fill whole words
    .kernel = KernelFamily::Affine,
    .kernel_form = int4_ct_as_affine,
    .grid = {GridKind::Symmetric, -8, 7, 7.5f, nullptr, int4_ct_fit_rtn, int4_ct_grid_code, int4_ct_value,
             int4_ct_pack_row},
    .layouts = {{"compressed-tensors"}, {"native"}},
    // q4_0 is ggml's symmetric 4-bit block (scale per 32): the nearest to a symmetric group.
    .gguf = {{0, "q4_0"}},
    .layout = int4_ct_layout,
    .quantize = int4_ct_quantize,
    .dequantize = int4_ct_dequantize,
};

}  // namespace qt::schemes_detail
