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

// One group: its scale and bias (the rule above) and its codes. Cloned for AVX2 (the library is
// built for the baseline ISA; convert runs this over every weight): the same IEEE operations in
// the same order, so both clones give the same bits.
__attribute__((target_clones("avx2", "default")))
void affine_group(const float* v, int g, float n_bins, uint8_t* codes, float* scale_out, float* bias_out) {
  const float eps = 1e-7f;
  float w_min = std::numeric_limits<float>::infinity();
  float w_max = -w_min;
  // Any order of the reduction gives the same extremes (a ±0 extreme's sign changes nothing below).
#pragma omp simd reduction(max : w_max) reduction(min : w_min)
  for (int j = 0; j < g; ++j) {
    w_max = v[j] > w_max ? v[j] : w_max;
    w_min = v[j] < w_min ? v[j] : w_min;
  }
  bool neg = std::abs(w_min) > std::abs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, eps);
  scale = neg ? scale : -scale;
  float edge = neg ? w_min : w_max;
  float q0 = std::rint(edge / scale);
  float bias = 0;
  if (q0 != 0) {
    scale = edge / q0;
    bias = edge;
  }
  for (int j = 0; j < g; ++j) {
    float q = std::rint((v[j] - bias) / scale);
    q = q < 0.0f ? 0.0f : q;
    q = q > n_bins ? n_bins : q;
    codes[j] = uint8_t(q);
  }
  *scale_out = scale;
  *bias_out = bias;
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

}  // namespace

const Scheme kAffine = {
    "affine",
    "MLX affine (mlx.core.quantize): per-group scale and bias in the weights' dtype",
    {2, 3, 4, 5, 6, 8},
    {32, 64, 128},
    4,
    64,
    false,
    false,
    affine_layout,
    affine_quantize,
    affine_dequantize,
};

}  // namespace qt::schemes_detail
