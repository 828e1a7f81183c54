// MLX affine quantization (mlx.core.quantize, mode "affine"): the CPU kernel
// (mlx/backend/cpu/quantized.cpp `quantize`, mlx 0.32; docs/spec/mlx-affine.md), bit-exact with the
// mlx / mlx-cpu 0.32.4 wheels (tests/golden/make_scheme_goldens.py).
//
// Per group of `group_size` consecutive values of a row, all in fp32:
//   n_bins = 2^bits − 1, eps = 1e-7
//   neg = |w_min| > |w_max|                        (strict: a tie takes w_max as the edge)
//   s = max((w_max − w_min)/n_bins, eps), negated unless neg; edge = neg ? w_min : w_max
//   q0 = rint(edge/s); if q0 ≠ 0: s = edge/q0, bias = edge  else bias = 0
//   q = clamp(rint((w − bias)/s), 0, n_bins)        rint = round half to even (the CPU kernel;
//                                                   MLX's Metal/CUDA kernels round halves away)
//   scales/biases stored in the weights' dtype (rounded after q is computed, so q uses the
//   unrounded fp32 s and bias)
// Dequantize (mlx.core.dequantize): w = q·s + b in the scales' dtype, the product rounded to it
// before the add (MLX multiplies then adds as two ops). Packing: each row's codes form one
// LSB-first bit stream (element j at bits [j·bits, (j+1)·bits)) in little-endian uint32 words.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "libquant/schemes/detail.h"

namespace qt::schemes_detail {

float affine_dequant(uint32_t q, float scale, float bias, DType t) {
  float prod = round_to(t, float(q) * scale);
  return round_to(t, prod + bias);
}

namespace {

PackedLayout affine_layout(const SchemeParams& p, int64_t rows, int64_t cols) {
  PackedLayout l;
  l.data = {DType::U32, {rows, cols * p.bits / 32}};
  l.scales = {p.dtype, {rows, cols / p.group_size}};
  l.biases = TensorSpec{p.dtype, {rows, cols / p.group_size}};
  return l;
}

// n codes of `bits` bits as one LSB-first bit stream (element j at bits [j·bits, (j+1)·bits)),
// n·bits a multiple of 8. The common widths without the bit accumulator.
void pack_lsb_first(const uint8_t* q, int n, int bits, uint8_t* dst) {
  if (bits == 8) {
    std::memcpy(dst, q, size_t(n));
  } else if (bits == 4) {
    for (int i = 0; i < n / 2; ++i) dst[i] = uint8_t(q[2 * i] | q[2 * i + 1] << 4);
  } else if (bits == 2) {
    for (int i = 0; i < n / 4; ++i)
      dst[i] = uint8_t(q[4 * i] | q[4 * i + 1] << 2 | q[4 * i + 2] << 4 | q[4 * i + 3] << 6);
  } else {
    uint64_t acc = 0;
    int nacc = 0;
    for (int j = 0; j < n; ++j) {
      acc |= uint64_t(q[j]) << nacc;
      nacc += bits;
      while (nacc >= 8) {
        *dst++ = uint8_t(acc & 0xff);
        acc >>= 8;
        nacc -= 8;
      }
    }
  }
}

// The rule above: one group's scale and bias from its extremes, and the code of x.
inline GroupParams affine_params(float w_min, float w_max, float n_bins) {
  const float eps = 1e-7f;
  const bool neg = std::abs(w_min) > std::abs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, eps);
  scale = neg ? scale : -scale;
  const float edge = neg ? w_min : w_max;
  const float q0 = std::rint(edge / scale);
  GroupParams g{scale, 0.0f};
  if (q0 != 0) g.scale = edge / q0, g.bias = edge;
  return g;
}
inline float affine_code(float x, float scale, float bias, float n_bins) {
  float q = std::rint((x - bias) / scale);
  q = q < 0.0f ? 0.0f : q;
  return q > n_bins ? n_bins : q;
}

// One group's RTN parameters: the rule above from its extremes. Any order of the reduction gives
// the same extremes (a ±0 extreme's sign changes nothing in the rule).
inline GroupParams affine_fit(const float* v, int64_t n, float n_bins) {
  float w_min = std::numeric_limits<float>::infinity();
  float w_max = -w_min;
#pragma omp simd reduction(max : w_max) reduction(min : w_min)
  for (int64_t j = 0; j < n; ++j) {
    w_max = v[j] > w_max ? v[j] : w_max;
    w_min = v[j] < w_min ? v[j] : w_min;
  }
  return affine_params(w_min, w_max, n_bins);
}

// One group: its scale and bias and its codes. Cloned for AVX2 (the library is built for the
// baseline ISA; convert runs this over every weight): the same IEEE operations in the same order,
// so both clones give the same bits.
__attribute__((target_clones("avx2", "default"))) void affine_group(const float* v, int g, float n_bins, uint8_t* codes,
                                                                    float* scale_out, float* bias_out) {
  const GroupParams p = affine_fit(v, g, n_bins);
  for (int j = 0; j < g; ++j) codes[j] = uint8_t(affine_code(v[j], p.scale, p.bias, n_bins));
  *scale_out = p.scale;
  *bias_out = p.bias;
}

PackedTensor affine_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p) {
  PackedLayout l = affine_layout(p, rows, cols);
  OutTensor data(l.data), scales(l.scales), biases(*l.biases);
  const float n_bins = float((1 << p.bits) - 1);
  const int g = p.group_size;
  const int64_t groups = cols / g;
  const size_t row_bytes = size_t(cols) * size_t(p.bits) / 8;
  uint8_t* out = data.as<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t codes[128];  // group sizes 32, 64, 128
    uint8_t* row_out = out + size_t(r) * row_bytes;
    for (int64_t gi = 0; gi < groups; ++gi) {
      const float* v = w + r * cols + gi * g;
      float scale, bias;
      affine_group(v, g, n_bins, codes, &scale, &bias);
      pack_lsb_first(codes, g, p.bits, row_out + size_t(gi) * size_t(g) * size_t(p.bits) / 8);
      size_t si = size_t(r * groups + gi);
      scales.store_float(si, scale);
      biases.store_float(si, bias);
    }
  }
  return finish_packed(p, rows, cols, data, scales, &biases);
}

void affine_dequantize(const PackedTensor& t, float* out) {
  const int bits = t.params.bits, g = t.params.group_size;
  const int64_t groups = t.cols / g;
  const size_t row_bytes = size_t(t.cols) * size_t(bits) / 8;
  const uint32_t mask = (1u << bits) - 1;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t.rows; ++r) {
    const uint8_t* row = t.data.data + size_t(r) * row_bytes;
    uint64_t acc = 0;
    int nacc = 0;
    for (int64_t gi = 0; gi < groups; ++gi) {
      float s = load_float(t.scales, size_t(r * groups + gi));
      float b = load_float(t.biases, size_t(r * groups + gi));
      for (int j = 0; j < g; ++j) {
        while (nacc < bits) {
          acc |= uint64_t(*row++) << nacc;
          nacc += 8;
        }
        uint32_t q = uint32_t(acc) & mask;
        acc >>= bits;
        nacc -= bits;
        out[r * t.cols + gi * g + j] = affine_dequant(q, s, b, t.params.dtype);
      }
    }
  }
}

float n_bins_of(const SchemeParams& p) { return float((1 << p.bits) - 1); }

GroupParams affine_fit_rtn(const float* v, int64_t n, const SchemeParams& p) { return affine_fit(v, n, n_bins_of(p)); }
int affine_grid_code(float x, const GroupParams& g, const SchemeParams& p) {
  return int(affine_code(x, g.scale, g.bias, n_bins_of(p)));
}
float affine_value(int q, const GroupParams& g, const SchemeParams& p) {
  return affine_dequant(uint32_t(q), g.scale, g.bias, p.dtype);
}
void affine_pack_row(const int16_t* q, int64_t cols, const SchemeParams& p, uint8_t* dst) {
  std::vector<uint8_t> u(q, q + cols);  // codes 0..2^bits − 1
  pack_lsb_first(u.data(), int(cols), p.bits, dst);
}

}  // namespace

const Scheme kAffine = {
    .name = "affine",
    .summary = "MLX affine (mlx.core.quantize): per-group scale and bias in the weights' dtype",
    .bits = {2, 3, 4, 5, 6, 8},
    .group_sizes = {32, 64, 128},
    .default_bits = 4,
    .default_group_size = 64,
    .flat_blocks = false,
    .col_align = 1,
    .kernel = KernelFamily::Affine,
    .kernel_form = nullptr,
    .grid = {GridKind::Affine, 0, 0, 0.0f, nullptr, affine_fit_rtn, affine_grid_code, affine_value, affine_pack_row},
    .layouts = {{"mlx"}, {"native"}},
    .gguf = {{8, "q8_0"}, {5, "q5_1"}, {0, "q4_1"}},
    .layout = affine_layout,
    .quantize = affine_quantize,
    .dequantize = affine_dequantize,
};

}  // namespace qt::schemes_detail
