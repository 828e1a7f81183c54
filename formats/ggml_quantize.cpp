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
  for (int j = 0; j < QK / 2; ++j) y[2 + j] = uint8_t(best_q[j] | (best_q[j + QK / 2] << 4));
}

void iq4_nl(const float* x, uint8_t* y) { iq4_nl_weighted(x, nullptr, y); }


// ------------------------------------------------------------------ K-quants (super-blocks of 256)
//
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: ggml's reference quantizers (ggml-quants.c quantize_row_q*_K_ref,
// what llama-quantize runs for them without an imatrix), restated in the same fp32 operation order
// (ggml-base is built without FMA, and so is this file), so the bytes are llama-quantize's (checked
// on the goldens and on every SmolLM2 tensor). Q2_K and Q3_K: see q2_k_impl / q3_k_impl.
//   Q4_K / Q5_K: 8 sub-blocks of 32, each an affine fit (scale, -min) chosen by make_qkx2's search
//     (grid of iscale = (nmax + rmin + rdelta*k) / (max - min), weighted least squares of scale and
//     min per candidate, weights av_x + |x|); the 8 scales and 8 mins quantized to 6 bits under the
//     super-block's fp16 d = max_scale / 63 and dmin = max_min / 63; codes re-derived from those.
//   Q6_K: 16 sub-blocks of 16, each a symmetric fit by make_qx's search (weights x^2), the 16 scales
//     quantized to int8 under fp16 d = max_scale / -128; codes re-derived.
// Block layouts (ggml-common.h): q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]} = 144 bytes,
// q5_K {d, dmin, scales[12], qh[32], qs[128]} = 176, q6_K {u8 ql[128], qh[64]; i8 scales[16]; f16 d} = 210.
//
// --imatrix: each super-block is quantized twice, by the reference rule and by the same rule with
// every per-element search weight multiplied by the element's channel importance (Q6_K: importance
// * sqrt(sigma^2 + x^2), sigma^2 = 2 * mean x^2, as llama.cpp's imatrix path weighs; Q3_K:
// importance * x^2); the one with the smaller importance-weighted squared error of the stored bytes
// is kept, so never worse than RTN.

constexpr int QK_K = 256;

// ggml's nearest_int: round half to even through the fp32 mantissa (|v| < 2^22).
inline int nearest_int(float v) {
  float f = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// make_qkx2_quants: affine fit of n values to codes 0..nmax; returns the scale, *the_min = -min.
float make_qkx2(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad = false) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * float(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = uint8_t(l);
      const float w = weights[i], fl = float(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * float(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::memcpy(L, Laux, size_t(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// make_qx_quants with rmse_type 1 (weights x^2, or qw): symmetric codes -nmax..nmax-1 stored + nmax.
float make_qx(int n, int nmax, const float* x, int8_t* L, const float* qw) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) amax = ax, max = x[i];
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = -float(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = int8_t(l + nmax);
    const float w = qw ? qw[i] : x[i] * x[i], fl = float(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = qw ? qw[i] : x[i] * x[i], fl = float(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = int8_t(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q4_K (nmax 15) and Q5_K (nmax 31); imp: per-element importance or null (the reference rule).
void qk_affine(const float* x, const float* imp, int nmax, uint8_t* y) {
  uint8_t L[QK_K], Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    if (imp)
      for (int l = 0; l < 32; ++l) weights[l] *= imp[32 * j + l];
    scales[j] = nmax == 15 ? make_qkx2(32, 15, xs, weights, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20)
                           : make_qkx2(32, 31, xs, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  uint8_t sc[12] = {};
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * mins[j])));
    if (j < 4) {
      sc[j] = ls, sc[j + 4] = lm;
    } else {
      sc[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      sc[j - 4] |= uint8_t((ls >> 4) << 6);
      sc[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  put_f16(y, max_scale / 63.0f);
  put_f16(y + 2, max_min / 63.0f);
  std::memcpy(y + 4, sc, 12);
  const float d16 = f16_to_f32(f32_to_f16(max_scale / 63.0f)), m16 = f16_to_f32(f32_to_f16(max_min / 63.0f));
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    if (j < 4) s = sc[j] & 63, m = sc[j + 4] & 63;
    else s = uint8_t((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4)), m = uint8_t((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
    const float d = d16 * float(s);
    if (d == 0.0f) continue;
    const float dm = m16 * float(m);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
  if (nmax == 15) {
    uint8_t* q = y + 16;
    for (int j = 0; j < QK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
    return;
  }
  uint8_t* qh = y + 16;
  uint8_t* ql = y + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < QK_K; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) l1 -= 16, qh[j] |= m1;
      if (l2 > 15) l2 -= 16, qh[j] |= m2;
      ql[j] = uint8_t(l1 | (l2 << 4));
    }
    m1 = uint8_t(m1 << 2), m2 = uint8_t(m2 << 2);
  }
}

void q6_k_impl(const float* x, const float* imp, uint8_t* y) {
  int8_t L[QK_K];
  float scales[16], qw[16];
  float max_scale = 0, max_abs_scale = 0;
  float sigma2 = 0;
  if (imp) {
    for (int j = 0; j < QK_K; ++j) sigma2 += x[j] * x[j];
    sigma2 = 2 * sigma2 / QK_K;
  }
  for (int ib = 0; ib < 16; ++ib) {
    const float* xs = x + 16 * ib;
    if (imp)
      for (int l = 0; l < 16; ++l) qw[l] = imp[16 * ib + l] * std::sqrt(sigma2 + xs[l] * xs[l]);
    const float scale = make_qx(16, 32, xs, L + 16 * ib, imp ? qw : nullptr);
    scales[ib] = scale;
    if (std::fabs(scale) > max_abs_scale) max_abs_scale = std::fabs(scale), max_scale = scale;
  }
  std::memset(y, 0, 210);
  if (max_abs_scale < 1e-15f) return;  // all zero: d = 0
  const float iscale = -128.0f / max_scale;
  put_f16(y + 208, 1 / iscale);
  const float d16 = f16_to_f32(f32_to_f16(1 / iscale));
  int8_t* sc = reinterpret_cast<int8_t*>(y + 192);
  for (int ib = 0; ib < 16; ++ib) sc[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
  for (int j = 0; j < 16; ++j) {
    const float d = d16 * float(sc[j]);
    if (d == 0.0f) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearest_int(x[16 * j + ii] / d);
      L[16 * j + ii] = int8_t(std::max(-32, std::min(31, l)) + 32);
    }
  }
  uint8_t* ql = y;
  uint8_t* qh = y + 128;
  for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
      ql[l] = uint8_t(q1 | (q3 << 4));
      ql[l + 32] = uint8_t(q2 | (q4 << 4));
      qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                      ((L[j + l + 96] >> 4) << 6));
    }
  }
}

// make_q3_quants with do_rmse (weights x^2, or qw): codes -nmax..nmax-1 stored + nmax, refined
// one element at a time (at most 5 passes) while the weighted fit improves.
float make_q3(int n, int nmax, const float* x, int8_t* L, const float* qw) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) amax = ax, max = x[i];
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float iscale = -float(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = int8_t(l);
    const float w = qw ? qw[i] : x[i] * x[i], fl = float(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = qw ? qw[i] : x[i] * x[i], fl = float(L[i]);
      float slx = sumlx - w * x[i] * fl;
      if (slx > 0) {
        float sl2 = suml2 - w * fl * fl;
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          const float fn = float(new_l);
          slx += w * x[i] * fn;
          sl2 += w * fn * fn;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = int8_t(new_l), sumlx = slx, suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Q2_K (ggml quantize_row_q2_K_ref): 16 sub-blocks of 16, affine 2-bit codes fit by make_qkx2 with
// weights |x| and absolute error; 4-bit scale and min under fp16 d = max_scale / 15, dmin = max_min / 15.
// Layout {u8 scales[16]; u8 qs[64]; f16 d, dmin} = 84 bytes.
void q2_k_impl(const float* x, const float* imp, uint8_t* y) {
  uint8_t L[QK_K], Laux[16];
  float weights[16], mins[16], scales[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]) * (imp ? imp[16 * j + l] : 1.0f);
    scales[j] = make_qkx2(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  uint8_t* sc = y;
  uint8_t* qs = y + 16;
  std::memset(sc, 0, 16);
  if (max_scale > 0) {
    const float iscale = 15.0f / max_scale;
    for (int j = 0; j < 16; ++j) sc[j] = uint8_t(nearest_int(iscale * scales[j]));
    put_f16(y + 80, max_scale / 15.0f);
  } else {
    put_f16(y + 80, 0.0f);
  }
  if (max_min > 0) {
    const float iscale = 15.0f / max_min;
    for (int j = 0; j < 16; ++j) sc[j] = uint8_t(sc[j] | (nearest_int(iscale * mins[j]) << 4));
    put_f16(y + 82, max_min / 15.0f);
  } else {
    put_f16(y + 82, 0.0f);
  }
  const float d16 = f16_to_f32(uint16_t(y[80] | (y[81] << 8))), m16 = f16_to_f32(uint16_t(y[82] | (y[83] << 8)));
  for (int j = 0; j < 16; ++j) {
    const float d = d16 * float(sc[j] & 0xF);
    if (d == 0.0f) continue;
    const float dm = m16 * float(sc[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearest_int((x[16 * j + ii] + dm) / d);
      L[16 * j + ii] = uint8_t(std::max(0, std::min(3, l)));
    }
  }
  for (int j = 0; j < QK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

// Q3_K (ggml quantize_row_q3_K_ref): 16 sub-blocks of 16, symmetric 3-bit codes by make_q3; 6-bit
// signed scales under fp16 d = max_scale / -32. Layout {u8 hmask[32]; u8 qs[64]; u8 scales[12];
// f16 d} = 110 bytes.
void q3_k_impl(const float* x, const float* imp, uint8_t* y) {
  int8_t L[QK_K];
  float scales[16], qw[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    if (imp)
      for (int l = 0; l < 16; ++l) qw[l] = imp[16 * j + l] * x[16 * j + l] * x[16 * j + l];
    scales[j] = make_q3(16, 4, x + 16 * j, L + 16 * j, imp ? qw : nullptr);
    const float a = std::fabs(scales[j]);
    if (a > amax) amax = a, max_scale = scales[j];
  }
  uint8_t* hmask = y;
  uint8_t* qs = y + 32;
  uint8_t* sc = y + 96;
  std::memset(sc, 0, 12);
  if (max_scale != 0.0f) {
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      int8_t l = int8_t(nearest_int(iscale * scales[j]));
      l = int8_t(std::max<int>(-32, std::min<int>(31, l)) + 32);
      if (j < 8) sc[j] = uint8_t(l & 0xF);
      else sc[j - 8] = uint8_t(sc[j - 8] | ((l & 0xF) << 4));
      l = int8_t(l >> 4);
      sc[j % 4 + 8] = uint8_t(sc[j % 4 + 8] | (l << (2 * (j / 4))));
    }
    put_f16(y + 108, 1 / iscale);
  } else {
    put_f16(y + 108, 0.0f);
  }
  const float d16 = f16_to_f32(uint16_t(y[108] | (y[109] << 8)));
  for (int j = 0; j < 16; ++j) {
    int s = j < 8 ? (sc[j] & 0xF) : (sc[j - 8] >> 4);
    s = (s | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
    const float d = d16 * float(s);
    if (d == 0.0f) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearest_int(x[16 * j + ii] / d);
      L[16 * j + ii] = int8_t(std::max(-4, std::min(3, l)) + 4);
    }
  }
  std::memset(hmask, 0, 32);
  int m = 0;
  uint8_t hm = 1;
  for (int j = 0; j < QK_K; ++j) {
    if (L[j] > 3) hmask[m] = uint8_t(hmask[m] | hm), L[j] = int8_t(L[j] - 4);
    if (++m == QK_K / 8) m = 0, hm = uint8_t(hm << 1);
  }
  for (int j = 0; j < QK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void q4_k(const float* x, uint8_t* y) { qk_affine(x, nullptr, 15, y); }
void q5_k(const float* x, uint8_t* y) { qk_affine(x, nullptr, 31, y); }
void q6_k(const float* x, uint8_t* y) { q6_k_impl(x, nullptr, y); }
void q2_k(const float* x, uint8_t* y) { q2_k_impl(x, nullptr, y); }
void q3_k(const float* x, uint8_t* y) { q3_k_impl(x, nullptr, y); }

// --imatrix for a K super-block: the reference block and the importance-weighted search's, the
// smaller importance-weighted error of the stored bytes wins.
void weighted_kblock(GgmlType t, const float* x, const float* w, uint8_t* y) {
  const GgmlTypeRow& row = *ggml_type_row(uint32_t(t));
  uint8_t cand[210];
  auto quant = [&](const float* imp, uint8_t* out) {
    if (t == GgmlType::Q6_K) q6_k_impl(x, imp, out);
    else if (t == GgmlType::Q2_K) q2_k_impl(x, imp, out);
    else if (t == GgmlType::Q3_K) q3_k_impl(x, imp, out);
    else qk_affine(x, imp, t == GgmlType::Q4_K ? 15 : 31, out);
  };
  auto err = [&](const uint8_t* b) {
    float v[QK_K];
    row.to_float(b, v, 1);
    double e = 0;
    for (int j = 0; j < QK_K; ++j) e += double(w[j]) * (double(x[j]) - v[j]) * (double(x[j]) - v[j]);
    return e;
  };
  quant(nullptr, y);
  quant(w, cand);
  if (err(cand) < err(y)) std::memcpy(y, cand, size_t(row.type_size));
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
    case GgmlType::Q4_K: return q4_k;
    case GgmlType::Q5_K: return q5_k;
    case GgmlType::Q6_K: return q6_k;
    case GgmlType::Q2_K: return q2_k;
    case GgmlType::Q3_K: return q3_k;
    default: return nullptr;
  }
}

// ------------------------------------------------------------------ importance-weighted (--imatrix)
//
// For the legacy types, a block's parameters chosen to minimise sum_j w_j (x_j - stored_j)^2, w_j
// the importance of the block's input channel j (mean x_j^2 over calibration text, what llama.cpp's
// imatrix holds), instead of the reference rule's absmax / min-max. Candidates (all scored on the
// bytes as stored, decoded by ggml_blocks' dequantizer; the reference block is always one, so the
// weighted error never exceeds RTN's):
//   symmetric (q8_0, q4_0, q5_0): d = s * (reference d), s in {0.80, 0.82, ..., 1.20}, each coded to
//     nearest and then refit by weighted least squares (d = sum w x q / sum w q^2) and re-coded;
//   affine (q4_1, q5_1): d = (max - min) / (n + delta), m = min, delta in {-1, -0.9, ..., +1}
//     (llama.cpp make_qkx2_quants' grid), each refit by weighted least squares of (d, m) given its
//     codes and re-coded.
// Not byte-compatible with llama-quantize --imatrix (its search differs); the output is an
// ordinary block of the type.

struct SymSpec {
  int lo, hi;  // code range
  int offset;  // stored nibble/byte = q + offset
  int bits;    // 4, 5, 8
};

// Codes of x under fp16-stored d (nearest, clamped), packed into y.
void sym_encode(const float* x, float d, const SymSpec& sp, uint8_t* y, int* q) {
  put_f16(y, d);
  const float d16 = f16_to_f32(f32_to_f16(d));
  const float id = d16 != 0.0f ? 1.0f / d16 : 0.0f;
  for (int j = 0; j < QK; ++j) q[j] = std::clamp(int(std::lround(x[j] * id)), sp.lo, sp.hi);
  if (sp.bits == 8) {
    for (int j = 0; j < QK; ++j) y[2 + j] = uint8_t(int8_t(q[j]));
  } else if (sp.bits == 4) {
    for (int j = 0; j < QK / 2; ++j) y[2 + j] = uint8_t((q[j] + sp.offset) | ((q[j + QK / 2] + sp.offset) << 4));
  } else {
    uint8_t u[QK];
    for (int j = 0; j < QK; ++j) u[j] = uint8_t(q[j] + sp.offset);
    pack5(u, y + 2, y + 6);
  }
}

void aff_encode(const float* x, float d, float m, int nmax, int bits, uint8_t* y, int* q) {
  put_f16(y, d);
  put_f16(y + 2, m);
  const float d16 = f16_to_f32(f32_to_f16(d)), m16 = f16_to_f32(f32_to_f16(m));
  const float id = d16 != 0.0f ? 1.0f / d16 : 0.0f;
  for (int j = 0; j < QK; ++j) q[j] = std::clamp(int(std::lround((x[j] - m16) * id)), 0, nmax);
  if (bits == 4) {
    for (int j = 0; j < QK / 2; ++j) y[4 + j] = uint8_t(q[j] | (q[j + QK / 2] << 4));
  } else {
    uint8_t u[QK];
    for (int j = 0; j < QK; ++j) u[j] = uint8_t(q[j]);
    pack5(u, y + 4, y + 8);
  }
}

double block_error(const GgmlTypeRow& row, const uint8_t* y, const float* x, const float* w) {
  float v[QK];
  row.to_float(y, v, 1);
  double e = 0;
  for (int j = 0; j < QK; ++j) e += double(w[j]) * (double(x[j]) - v[j]) * (double(x[j]) - v[j]);
  return e;
}

void weighted_block(GgmlType t, const float* x, const float* w, uint8_t* y) {
  const GgmlTypeRow& row = *ggml_type_row(uint32_t(t));
  const size_t bytes = size_t(row.type_size);
  block_fn(t)(x, y);  // the reference block
  double best = block_error(row, y, x, w);
  uint8_t cand[34];
  int q[QK];
  auto consider = [&] {
    const double e = block_error(row, cand, x, w);
    if (e < best) best = e, std::memcpy(y, cand, bytes);
  };
  if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1) {
    const int nmax = t == GgmlType::Q4_1 ? 15 : 31, bits = t == GgmlType::Q4_1 ? 4 : 5;
    float mn, mx;
    min_max(x, &mn, &mx);
    if (mx == mn) return;
    for (int k = -10; k <= 10; ++k) {
      aff_encode(x, (mx - mn) / (nmax + 0.1f * k), mn, nmax, bits, cand, q);
      consider();
      double sw = 0, swq = 0, swqq = 0, swx = 0, swxq = 0;
      for (int j = 0; j < QK; ++j) {
        const double wj = w[j];
        sw += wj, swq += wj * q[j], swqq += wj * q[j] * q[j], swx += wj * x[j], swxq += wj * x[j] * q[j];
      }
      const double det = sw * swqq - swq * swq;
      if (det <= 0) continue;
      const double d = (sw * swxq - swq * swx) / det, m = (swqq * swx - swq * swxq) / det;
      if (!(d > 0)) continue;
      aff_encode(x, float(d), float(m), nmax, bits, cand, q);
      consider();
    }
    return;
  }
  const SymSpec sp = t == GgmlType::Q8_0 ? SymSpec{-127, 127, 0, 8}
                     : t == GgmlType::Q4_0 ? SymSpec{-8, 7, 8, 4}
                                           : SymSpec{-16, 15, 16, 5};
  const float d_ref = t == GgmlType::Q8_0 ? [&] {
    float a = 0;
    for (int j = 0; j < QK; ++j) a = std::max(a, std::fabs(x[j]));
    return a / 127.0f;
  }() : signed_absmax(x) / float(sp.lo);
  if (d_ref == 0.0f) return;
  for (int k = -10; k <= 10; ++k) {
    sym_encode(x, d_ref * (1.0f + 0.02f * k), sp, cand, q);
    consider();
    double sxq = 0, sqq = 0;
    for (int j = 0; j < QK; ++j) sxq += double(w[j]) * x[j] * q[j], sqq += double(w[j]) * q[j] * q[j];
    if (sqq <= 0) continue;
    sym_encode(x, float(sxq / sqq), sp, cand, q);
    consider();
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
  const GgmlTypeRow& row = *ggml_type_row(uint32_t(type));
  const size_t bytes = size_t(row.type_size);
  const int64_t bs = row.block_size, nb = N / bs;
#pragma omp parallel for schedule(static) if (nb * bs > 4096 * QK)
  for (int64_t b = 0; b < nb; ++b) fn(src + b * bs, dst + size_t(b) * bytes);
}

void ggml_quantize_weighted(GgmlType type, const float* src, int64_t rows, int64_t cols, const float* imp,
                            uint8_t* dst) {
  if (!imp || !block_fn(type)) {
    ggml_quantize(type, src, size_t(rows * cols), dst);
    return;
  }
  const GgmlTypeRow& row = *ggml_type_row(uint32_t(type));
  const size_t bytes = size_t(row.type_size);
  const int64_t bs = row.block_size, per_row = cols / bs, nb = rows * per_row;
#pragma omp parallel for schedule(static) if (nb * bs > 1024 * QK)
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * bs;
    const float* w = imp + (b % per_row) * bs;
    uint8_t* y = dst + size_t(b) * bytes;
    if (type == GgmlType::IQ4_NL) iq4_nl_weighted(x, w, y);
    else if (bs == QK_K) weighted_kblock(type, x, w, y);
    else weighted_block(type, x, w, y);
  }
}

}  // namespace qt
