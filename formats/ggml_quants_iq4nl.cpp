// ggml's IQ4_NL (ggml-common.h block_iq4_nl): blocks of 32 on a non-uniform 4-bit grid. The
// dequantization is gguf-py's (gguf/quants.py) bit for bit; the quantization is ours (below).
// No FMA contraction (numpy never fuses).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>
#include <cstring>

#include "formats/ggml_quants_common.h"

namespace qt::ggml {

void pack_codes_iq4_nl(GgmlType, const uint8_t* L, uint8_t* y);

namespace {

// IQ4_NL: d * kvalues[nibble] (non-linear 4-bit grid).
void deq_iq4_nl(const uint8_t* src, float* dst, size_t nb) {
  static constexpr int8_t kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (size_t b = 0; b < nb; ++b, src += 18, dst += 32) {
    const float d = h2f(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(kv[qs[j] & 0xF]);
      dst[j + 16] = d * float(kv[qs[j] >> 4]);
    }
  }
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

// Weighted error of the block under fp16-rounded scale d when coded to the nearest values (w null:
// all weights 1); codes out.
inline double iq4_code(const float* x, const float* w, float d, uint8_t* q) {
  const float d16 = f16_to_f32(f32_to_f16(d));
  const float id = d16 != 0.0f ? 1.0f / d16 : 0.0f;
  double err = 0;
  for (int j = 0; j < QK; ++j) {
    q[j] = uint8_t(iq4_nearest(x[j] * id));
    const double e = double(x[j]) - double(d16 * float(kIq4nl[q[j]]));
    err += (w ? double(w[j]) : 1.0) * e * e;
  }
  return err;
}

void iq4_nl_weighted(const float* x, const float* w, uint8_t* y) {
  const float max = signed_absmax(x);
  uint8_t best_q[QK] = {}, q[QK];
  float best_d = 0.0f;
  if (max != 0.0f) {
    double best_err = 1e300;
    for (int k = -5; k <= 5; ++k) {
      float d = (1.0f + 0.02f * k) * max / -127.0f;
      for (int pass = 0; pass < 2; ++pass) {
        const double err = iq4_code(x, w, d, q);
        if (err < best_err) best_err = err, best_d = d, std::memcpy(best_q, q, QK);
        if (pass == 1) break;
        double sxv = 0, svv = 0;  // (weighted) least-squares scale for these codes
        for (int j = 0; j < QK; ++j) {
          const double wj = w ? w[j] : 1.0, v = kIq4nl[q[j]];
          sxv += wj * x[j] * v, svv += wj * v * v;
        }
        if (svv == 0) break;
        d = float(sxv / svv);
      }
    }
  }
  put_f16(y, best_d);
  pack_codes_iq4_nl(GgmlType::IQ4_NL, best_q, y);
}

}  // namespace

void pack_codes_iq4_nl(GgmlType, const uint8_t* L, uint8_t* y) {
  for (int j = 0; j < QK / 2; ++j) y[2 + j] = uint8_t(L[j] | (L[j + QK / 2] << 4));
}

// One type in this family: t is IQ4_NL.
void dequantize_iq4_nl(GgmlType, const uint8_t* src, float* dst, size_t nb) { deq_iq4_nl(src, dst, nb); }
void quantize_iq4_nl(GgmlType, const float* x, const float* imp, uint8_t* y) { iq4_nl_weighted(x, imp, y); }

}  // namespace qt::ggml
