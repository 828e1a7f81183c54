// FP8 E4M3 in 128×128 blocks, as compressed-tensors 0.20 computes llm-compressor's FP8_BLOCK preset
// (weights: type "float", strategy "block", block_structure [128, 128]; _process_block in
// quantization/lifecycle/forward_helpers.py), all arithmetic in the weights' dtype T:
//   the weight zero-padded to whole blocks (maybe_pad_tensor_for_block_quant; padding cannot
//   change a block's absmax), s = T(absmax / 448) per block (0 → eps(T)), each element's code
//   e4m3(clamp(T(w/s) + 0, ±448)) as the fp8 row codes it; the padding dropped again.
//   weight F8_E4M3 [rows, cols]; weight_scale T [ceil(rows/128), cols/128].
//   Dequantize: T(e4m3_value(code)·s) (the decompressor); the Linear multiplies e4m3·s unrounded,
//   as FP8 block GEMMs and compressed-tensors' forward in an fp32 model do (kernel_values).
// Activations (input_activations: strategy "group", group_size 128, dynamic): per token and group
// of 128 columns s = absmax/448 in fp32, value = e4m3(x/s)·s (fake_quantize). The package refuses
// a width that 128 does not divide (_process_group), so the row requires cols % 128 == 0 (weights
// of other widths stay unquantized, as scheme_fits reports).
#include "libquant/schemes/detail.h"
#include "libquant/schemes/e4m3.h"

namespace qt {

namespace {
constexpr int kBlock = 128;
int64_t row_blocks(int64_t rows) { return (rows + kBlock - 1) / kBlock; }
}  // namespace

void round_activations_fp8_groups(float* x, int64_t n_tokens, int64_t k) {
#pragma omp parallel for schedule(static) if (n_tokens * k > (1 << 15))
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t g = 0; g + kBlock <= k; g += kBlock) {
      float* v = x + t * k + g;
      const float s = quantize_token_fp8(v, kBlock, v);
      for (int i = 0; i < kBlock; ++i) v[i] *= s;
    }
}

namespace schemes_detail {

namespace {

PackedLayout fp8_block_layout(const SchemeParams& p, int64_t rows, int64_t cols) {
  PackedLayout l;
  l.data = {DType::F8_E4M3, {rows, cols}};
  l.scales = {p.dtype, {row_blocks(rows), cols / kBlock}};
  return l;
}

PackedTensor fp8_block_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p) {
  const PackedLayout l = fp8_block_layout(p, rows, cols);
  OutTensor data(l.data), scales(l.scales);
  uint8_t* q = data.as<uint8_t>();
  const int64_t rb = row_blocks(rows), cb = cols / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < rb * cb; ++b) {
    const int64_t r0 = (b / cb) * kBlock, r1 = std::min(rows, r0 + kBlock), c0 = (b % cb) * kBlock;
    float amax = 0.0f;
    for (int64_t r = r0; r < r1; ++r) amax = std::max(amax, span_absmax(w + r * cols + c0, kBlock));
    const float s = ct_scale(amax, 448.0f, p.dtype);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = c0; j < c0 + kBlock; ++j) q[r * cols + j] = fp8_code(w[r * cols + j], s, p.dtype);
    scales.store_float(size_t(b), s);
  }
  return finish_packed(p, rows, cols, data, scales);
}

void fp8_block_dequantize(const PackedTensor& t, float* out) {
  const int64_t cb = t.cols / kBlock;
  const uint8_t* q = t.data.as<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t j = 0; j < t.cols; ++j) {
      const float s = load_float(t.scales, size_t((r / kBlock) * cb + j / kBlock));
      out[r * t.cols + j] = fp8_value(q[r * t.cols + j], s, t.params.dtype);
    }
}

// What the Linear multiplies: e4m3(code)·s in fp32 (kernel_values, scheme.h).
void fp8_block_kernel_values(const PackedTensor& t, float* out) {
  const int64_t cb = t.cols / kBlock;
  const uint8_t* q = t.data.as<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t j = 0; j < t.cols; ++j)
      out[r * t.cols + j] =
          e4m3_to_f32(q[r * t.cols + j]) * load_float(t.scales, size_t((r / kBlock) * cb + j / kBlock));
}

// The grid's steps are never driven for this row (block_rows > 1: SchemeGrid::fits refuses the
// calibrated quantizers); they state the per-element rule for completeness of the table row.
GroupParams fp8_block_fit_rtn(const float* v, int64_t n, const SchemeParams& p) {
  return {ct_scale(span_absmax(v, n), 448.0f, p.dtype), 0.0f};
}
int fp8_block_grid_code(float x, const GroupParams& g, const SchemeParams& p) { return fp8_code(x, g.scale, p.dtype); }
float fp8_block_grid_value(int q, const GroupParams& g, const SchemeParams& p) {
  return fp8_value(q, g.scale, p.dtype);
}
void fp8_block_pack_row(const int16_t* q, int64_t cols, const SchemeParams&, uint8_t* dst) {
  for (int64_t j = 0; j < cols; ++j) dst[j] = uint8_t(q[j]);
}

}  // namespace

const Scheme kFp8Block = {
    .name = "fp8_block",
    .summary =
        "FP8 E4M3 in 128x128 blocks (compressed-tensors FP8_BLOCK): scale absmax/448 per block in the weights' "
        "dtype; E4M3 activations per token in dynamic groups of 128",
    .bits = {8},
    .group_sizes = {kBlock},
    .default_bits = 8,
    .default_group_size = kBlock,
    .flat_blocks = false,
    .col_align = 1,
    .kernel = KernelFamily::Dequantized,
    .kernel_form = nullptr,
    .grid = {GridKind::Float, 0, 255, 448.0f, nullptr, fp8_block_fit_rtn, fp8_block_grid_code, fp8_block_grid_value,
             fp8_block_pack_row},
    .layouts = {{"compressed-tensors"}, {"native"}},
    .gguf = {{0, "q8_0"}},
    .layout = fp8_block_layout,
    .quantize = fp8_block_quantize,
    .dequantize = fp8_block_dequantize,
    .tensor_scale = nullptr,
    .round_activations = round_activations_fp8_groups,
    .block_rows = kBlock,
    .kernel_values = fp8_block_kernel_values,
};

}  // namespace schemes_detail
}  // namespace qt
