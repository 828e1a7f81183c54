// ggml's reference quantizers, restated (not copied) from what ggml-quants.c computes:
// per block of 32, one scale (and a minimum for the _1 types) stored as fp16, the codes from
// x * (1/d) rounded as the C code rounds (roundf for Q8_0, truncation of x*id + 8.5 / 16.5 / 0.5
// for the 4- and 5-bit types). The arithmetic order matters for byte equality: the scale is
// computed in fp32, its reciprocal taken in fp32, and every code from the fp32 product.
// No FMA contraction: gguf-py's numpy (our golden reference) never fuses, and a fused
// (x - min) * id + 0.5 can round differently at a .5 boundary.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "formats/ggml_quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "formats/tensor.h"

namespace qt {

namespace {

constexpr int QK = 32;

inline void put_f16(uint8_t* p, float f) {
  const uint16_t h = f32_to_f16(f);
  p[0] = uint8_t(h & 0xff);
  p[1] = uint8_t(h >> 8);
}

// Value of largest magnitude (the first one on ties), signed: Q4_0 / Q5_0 scale by it so that it
// maps to the code range's end (-8 / -16) exactly.
inline float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < QK; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
  return max;
}

inline void min_max(const float* x, float* mn, float* mx) {
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (int j = 0; j < QK; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  *mn = lo, *mx = hi;
}

// Block layouts (ggml-common.h): q8_0 {f16 d; i8 qs[32]} = 34 bytes; q4_0 {f16 d; u8 qs[16]} = 18;
// q4_1 {f16 d, m; u8 qs[16]} = 20; q5_0 {f16 d; u8 qh[4]; u8 qs[16]} = 22; q5_1 {f16 d, m; qh; qs} = 24.
// Nibbles: element j in the low half of qs[j], element j + 16 in the high half.

void q8_0(const float* x, uint8_t* y) {
  float amax = 0.0f;
  for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(y, d);
  for (int j = 0; j < QK; ++j) y[2 + j] = uint8_t(int8_t(std::roundf(x[j] * id)));
}

void q4_0(const float* x, uint8_t* y) {
  const float d = signed_absmax(x) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(y, d);
  for (int j = 0; j < QK / 2; ++j) {
    const uint8_t a = uint8_t(std::min(15, int(int8_t(x[j] * id + 8.5f))));
    const uint8_t b = uint8_t(std::min(15, int(int8_t(x[j + QK / 2] * id + 8.5f))));
    y[2 + j] = uint8_t(a | (b << 4));
  }
}

void q4_1(const float* x, uint8_t* y) {
  float mn, mx;
  min_max(x, &mn, &mx);
  const float d = (mx - mn) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(y, d);
  put_f16(y + 2, mn);
  for (int j = 0; j < QK / 2; ++j) {
    const uint8_t a = uint8_t(std::min(15, int(int8_t((x[j] - mn) * id + 0.5f))));
    const uint8_t b = uint8_t(std::min(15, int(int8_t((x[j + QK / 2] - mn) * id + 0.5f))));
    y[4 + j] = uint8_t(a | (b << 4));
  }
}

// The fifth bits of the 32 codes go to qh: bit j for element j, bit j + 16 for element j + 16.
inline void pack5(const uint8_t* q, uint8_t* qh, uint8_t* qs) {
  uint32_t h = 0;
  for (int j = 0; j < QK / 2; ++j) {
    qs[j] = uint8_t((q[j] & 0x0f) | ((q[j + QK / 2] & 0x0f) << 4));
    h |= uint32_t((q[j] >> 4) & 1) << j;
    h |= uint32_t((q[j + QK / 2] >> 4) & 1) << (j + QK / 2);
  }
  for (int k = 0; k < 4; ++k) qh[k] = uint8_t(h >> (8 * k));
}

void q5_0(const float* x, uint8_t* y) {
  const float d = signed_absmax(x) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(y, d);
  uint8_t q[QK];
  for (int j = 0; j < QK; ++j) q[j] = uint8_t(std::min(31, int(int8_t(x[j] * id + 16.5f))));
  pack5(q, y + 2, y + 6);
}

void q5_1(const float* x, uint8_t* y) {
  float mn, mx;
  min_max(x, &mn, &mx);
  const float d = (mx - mn) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(y, d);
  put_f16(y + 2, mn);
  uint8_t q[QK];
  // ggml does not clamp here: (mx - mn) * id + 0.5 stays below 32.
  for (int j = 0; j < QK; ++j) q[j] = uint8_t((x[j] - mn) * id + 0.5f);
  pack5(q, y + 4, y + 8);
}

// IQ4_NL (ggml-common.h block_iq4_nl {f16 d; u8 qs[16]} = 18 bytes, nibbles as q4_0): value
// d * kIq4nl[code], a non-uniform table. llama.cpp's quantize_row_iq4_nl_impl is a search with
// its own weights (x², or the imatrix); ours, not byte-compatible with it and not meant to be:
// for each candidate scale d = s * max / -127, s in {0.90, 0.92, ..., 1.10} (s = 1 maps the
// value of largest magnitude onto the table's end, -127), code every element to the nearest
// table value of x / d, refit d by least squares given those codes (sum x*v / sum v*v), re-code,
// and keep the candidate whose error sum (x - d16 * v)^2 is smallest with d rounded to fp16 as
// stored. s = 1 alone is the RTN rule; the search never does worse than it.
constexpr int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Index of the table value nearest to v (ties: the lower): how many midpoints between
// neighbours lie strictly below v. Branch-free, so the per-element loop vectorizes.
constexpr float kIq4Mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                               7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};
inline int iq4_nearest(float v) {
  int n = 0;
  for (float m : kIq4Mid) n += v > m;
  return n;
}

// Error of the block under fp16-rounded scale d when coded to the nearest values; codes out.
inline double iq4_code(const float* x, float d, uint8_t* q) {
  const float d16 = f16_to_f32(f32_to_f16(d));
  const float id = d16 != 0.0f ? 1.0f / d16 : 0.0f;
  double err = 0;
  for (int j = 0; j < QK; ++j) {
    q[j] = uint8_t(iq4_nearest(x[j] * id));
    const double e = double(x[j]) - double(d16) * kIq4nl[q[j]];
    err += e * e;
  }
  return err;
}

void iq4_nl(const float* x, uint8_t* y) {
  const float max = signed_absmax(x);
  uint8_t best_q[QK] = {}, q[QK];
  float best_d = 0.0f;
  if (max != 0.0f) {
    double best_err = 1e300;
    for (int k = -5; k <= 5; ++k) {
      float d = (1.0f + 0.02f * k) * max / -127.0f;
      for (int pass = 0; pass < 2; ++pass) {
        const double err = iq4_code(x, d, q);
        if (err < best_err) best_err = err, best_d = d, std::memcpy(best_q, q, QK);
        if (pass == 1) break;
        double sxv = 0, svv = 0;  // least-squares scale for these codes
        for (int j = 0; j < QK; ++j) sxv += double(x[j]) * kIq4nl[q[j]], svv += double(kIq4nl[q[j]]) * kIq4nl[q[j]];
        if (svv == 0) break;
        d = float(sxv / svv);
      }
    }
  }
  put_f16(y, best_d);
  for (int j = 0; j < QK / 2; ++j) y[2 + j] = uint8_t(best_q[j] | (best_q[j + QK / 2] << 4));
}

using BlockFn = void (*)(const float*, uint8_t*);

BlockFn block_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return q8_0;
    case GgmlType::Q4_0: return q4_0;
    case GgmlType::Q4_1: return q4_1;
    case GgmlType::Q5_0: return q5_0;
    case GgmlType::Q5_1: return q5_1;
    case GgmlType::IQ4_NL: return iq4_nl;
    default: return nullptr;
  }
}

}  // namespace

bool ggml_can_quantize(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || block_fn(type) != nullptr;
}

size_t ggml_nbytes(GgmlType type, size_t n) {
  const GgmlTypeRow* row = ggml_type_row(uint32_t(type));
  return n / size_t(row->block_size) * size_t(row->type_size);
}

void ggml_quantize(GgmlType type, const float* src, size_t n, uint8_t* dst) {
  const int64_t N = int64_t(n);
  switch (type) {
    case GgmlType::F32:
      if (n) std::memcpy(dst, src, n * 4);
      return;
    case GgmlType::F16:
#pragma omp parallel for schedule(static) if (N > (1 << 16))
      for (int64_t i = 0; i < N; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::BF16:
#pragma omp parallel for schedule(static) if (N > (1 << 16))
      for (int64_t i = 0; i < N; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    default: break;
  }
  const BlockFn fn = block_fn(type);
  const size_t bytes = size_t(ggml_type_row(uint32_t(type))->type_size);
  const int64_t nb = N / QK;
#pragma omp parallel for schedule(static) if (nb > 4096)
  for (int64_t b = 0; b < nb; ++b) fn(src + b * QK, dst + size_t(b) * bytes);
}

}  // namespace qt
