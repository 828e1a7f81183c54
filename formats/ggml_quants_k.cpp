// ggml's K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of 256; ggml-common.h layouts).
// Dequantization: gguf-py's numpy code (gguf/quants.py) bit for bit, the same operations in the same
// order, all fp32. Quantization: below. No FMA contraction (numpy and ggml-base never fuse).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/ggml_quants_common.h"

namespace qt::ggml {

namespace {

// Q2_K: (d * (sc & 15)) * q - dmin * (sc >> 4), 16 sub-blocks of 16.
void deq_q2_k(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 84, dst += QK_K) {
    const uint8_t* scales = src;
    const uint8_t* qs = src + 16;
    const float d = h2f(src + 80), dmin = h2f(src + 82);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int half = 0; half < 2; ++half) {
          const int s = 8 * h + 2 * j + half;
          const float dl = d * float(scales[s] & 0xF);
          const float ml = dmin * float(scales[s] >> 4);
          float* y = dst + 128 * h + 32 * j + 16 * half;
          const uint8_t* q = qs + 32 * h + 16 * half;
          for (int l = 0; l < 16; ++l) y[l] = dl * float((q[l] >> (2 * j)) & 3) - ml;
        }
  }
}

// Q3_K: (d * (sc - 32)) * q, q = low 2 bits - (high bit set ? 0 : 4).
void deq_q3_k(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 110, dst += QK_K) {
    const uint8_t* hmask = src;
    const uint8_t* qs = src + 32;
    const uint8_t* sb = src + 96;
    const float d = h2f(src + 108);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int half = 0; half < 2; ++half) {
          const int k = 8 * h + 2 * j + half;  // 0..15
          const int lsc = (k < 8 ? sb[k] : sb[k - 8] >> 4) & 0xF;
          const int hsc = (sb[8 + k % 4] >> (2 * (k / 4))) & 3;
          const float dl = d * float((lsc | (hsc << 4)) - 32);
          float* y = dst + 128 * h + 32 * j + 16 * half;
          const int bit = 4 * h + j;
          for (int l0 = 0; l0 < 16; ++l0) {
            const int l = 16 * half + l0;
            int q = (qs[32 * h + l] >> (2 * j)) & 3;
            q -= ((hmask[l] >> bit) & 1) ? 0 : 4;
            y[l0] = dl * float(q);
          }
        }
  }
}

// Q4_K / Q5_K 6-bit scale and min of sub-block t (0..7).
inline void scale_min_k4(int t, const uint8_t* s, int* sc, int* mn) {
  if (t < 4) {
    *sc = s[t] & 63;
    *mn = s[t + 4] & 63;
  } else {
    *sc = (s[t + 4] & 0xF) | ((s[t - 4] >> 6) << 4);
    *mn = (s[t + 4] >> 4) | ((s[t] >> 6) << 4);
  }
}

// Q4_K: (d * sc) * q - dmin * mn, 8 sub-blocks of 32.
void deq_q4_k(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 144, dst += QK_K) {
    const float d = h2f(src), dmin = h2f(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qs = src + 16;
    for (int t = 0; t < 8; ++t) {
      int sc, mn;
      scale_min_k4(t, scales, &sc, &mn);
      const float dl = d * float(sc), ml = dmin * float(mn);
      const uint8_t* q = qs + 32 * (t / 2);
      const int shift = 4 * (t % 2);
      float* y = dst + 32 * t;
      for (int l = 0; l < 32; ++l) y[l] = dl * float((q[l] >> shift) & 0xF) - ml;
    }
  }
}

// Q5_K: as Q4_K with a fifth bit from qh (bit t of qh[l] for sub-block t).
void deq_q5_k(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 176, dst += QK_K) {
    const float d = h2f(src), dmin = h2f(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + 48;
    for (int t = 0; t < 8; ++t) {
      int sc, mn;
      scale_min_k4(t, scales, &sc, &mn);
      const float dl = d * float(sc), ml = dmin * float(mn);
      const uint8_t* q = qs + 32 * (t / 2);
      const int shift = 4 * (t % 2);
      float* y = dst + 32 * t;
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0xF) | (((qh[l] >> t) & 1) << 4);
        y[l] = dl * float(v) - ml;
      }
    }
  }
}

// Q6_K: (d * scale) * (q - 32), 16 sub-blocks of 16 with int8 scales.
void deq_q6_k(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 210, dst += QK_K) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* scales = reinterpret_cast<const int8_t*>(src + 192);
    const float d = h2f(src + 208);
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int half = 0; half < 2; ++half) {
          const float dl = d * float(scales[8 * h + 2 * k + half]);
          float* y = dst + 128 * h + 32 * k + 16 * half;
          const uint8_t* lo = ql + 64 * h + 32 * (k % 2) + 16 * half;
          const uint8_t* hi = qh + 32 * h + 16 * half;
          const int lshift = 4 * (k / 2);
          for (int l = 0; l < 16; ++l) {
            const int q = (((lo[l] >> lshift) & 0xF) | (((hi[l] >> (2 * k)) & 3) << 4)) - 32;
            y[l] = dl * float(q);
          }
        }
  }
}

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
// importance * x^2); Q3_K, Q4_K and Q5_K also try llama-quantize's own --imatrix block (its
// quantize_row_q*_K_impl restated: the same bytes given the same importances); the one with the
// smallest importance-weighted squared error of the stored bytes is kept, so never worse than RTN.

// make_qkx2_quants: affine fit of n values to codes 0..nmax; returns the scale, *the_min = -min.
float make_qkx2(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                float rmin, float rdelta, int nstep, bool use_mad = false) {
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

// A Q4_K / Q5_K super-block from its 6-bit sub-block scales ls and mins lm under the super-scales
// d and dmin (stored fp16): the codes of x against the stored values, packed; a sub-block whose
// stored scale is 0 keeps its codes from the search (L), as ggml's do.
void qk_store(const float* x, int nmax, const uint8_t* ls, const uint8_t* lm, float d_block, float m_block, uint8_t* L,
              uint8_t* y) {
  uint8_t sc[12] = {};
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      sc[j] = ls[j], sc[j + 4] = lm[j];
    } else {
      sc[j + 4] = uint8_t((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      sc[j - 4] |= uint8_t((ls[j] >> 4) << 6);
      sc[j] |= uint8_t((lm[j] >> 4) << 6);
    }
  }
  put_f16(y, d_block);
  put_f16(y + 2, m_block);
  std::memcpy(y + 4, sc, 12);
  const float d16 = f16_to_f32(f32_to_f16(d_block)), m16 = f16_to_f32(f32_to_f16(m_block));
  for (int j = 0; j < 8; ++j) {
    const float d = d16 * float(ls[j]);
    if (d == 0.0f) continue;
    const float dm = m16 * float(lm[j]);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
  pack_codes_k(nmax == 15 ? GgmlType::Q4_K : GgmlType::Q5_K, L, y);
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
  uint8_t ls[8], lm[8];
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * mins[j])));
  }
  qk_store(x, nmax, ls, lm, max_scale / 63.0f, max_min / 63.0f, L, y);
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
  pack_codes_k(GgmlType::Q6_K, reinterpret_cast<const uint8_t*>(L), y);
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
  pack_codes_k(GgmlType::Q2_K, L, y);
}

// Q3_K (ggml quantize_row_q3_K_ref): 16 sub-blocks of 16, symmetric 3-bit codes by make_q3; 6-bit
// signed scales under fp16 d = max_scale / -32. Layout {u8 hmask[32]; u8 qs[64]; u8 scales[12];
// f16 d} = 110 bytes.
// Q3_K's tail, both rules: the 16 scales as stored 6-bit values Ls (0..63 = l + 32; null: all zero)
// under fp16 d_block, then each element's code re-derived from its stored scale (a sub-block whose
// scale is 0 keeps the fit's codes L), packed.
void q3_k_store(const float* x, const int8_t* Ls, float d_block, int8_t* L, uint8_t* y) {
  uint8_t* sc = y + 96;
  std::memset(sc, 0, 12);
  for (int j = 0; Ls && j < 16; ++j) {
    int8_t l = Ls[j];
    if (j < 8)
      sc[j] = uint8_t(l & 0xF);
    else
      sc[j - 8] = uint8_t(sc[j - 8] | ((l & 0xF) << 4));
    l = int8_t(l >> 4);
    sc[j % 4 + 8] = uint8_t(sc[j % 4 + 8] | (l << (2 * (j / 4))));
  }
  put_f16(y + 108, d_block);
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
  pack_codes_k(GgmlType::Q3_K, reinterpret_cast<const uint8_t*>(L), y);
}

void q3_k_impl(const float* x, const float* imp, uint8_t* y) {
  int8_t L[QK_K], Ls[16];
  float scales[16], qw[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    if (imp)
      for (int l = 0; l < 16; ++l) qw[l] = imp[16 * j + l] * x[16 * j + l] * x[16 * j + l];
    scales[j] = make_q3(16, 4, x + 16 * j, L + 16 * j, imp ? qw : nullptr);
    const float a = std::fabs(scales[j]);
    if (a > amax) amax = a, max_scale = scales[j];
  }
  if (max_scale == 0.0f) return q3_k_store(x, nullptr, 0.0f, L, y);
  const float iscale = -32.0f / max_scale;
  for (int j = 0; j < 16; ++j)
    Ls[j] = int8_t(std::max<int>(-32, std::min<int>(31, nearest_int(iscale * scales[j]))) + 32);
  q3_k_store(x, Ls, 1 / iscale, L, y);
}

// Q3_K as llama-quantize --imatrix makes it (ggml-quants.c quantize_row_q3_K_impl): each sub-block
// by make_qx_quants with weights imp·sqrt(σ² + x²), σ² = 2·mean x² over the super-block; the 16
// scales themselves fit by make_qx_quants (nmax 32) weighted by their sub-blocks' summed weights.
void q3_k_llama_imatrix(const float* x, const float* imp, uint8_t* y) {
  int8_t L[QK_K], Ls[16];
  float scales[16], weight[16], sw[16];
  float sumx2 = 0;
  for (int j = 0; j < QK_K; ++j) sumx2 += x[j] * x[j];
  const float sigma2 = 2 * sumx2 / QK_K;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weight[l] = imp[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 16; ++l) sumw += weight[l];
    sw[j] = sumw;
    scales[j] = make_qx(16, 4, x + 16 * j, L + 16 * j, weight);
  }
  const float d_block = make_qx(16, 32, scales, Ls, sw);
  q3_k_store(x, Ls, d_block, L, y);
}

// make_qp_quants (ggml-quants.c): n non-negative values x on codes 0..nmax under one scale, weighted
// by quant_weights: max/nmax and 8 nearby grids, the best refined by moving single codes while the
// weighted fit improves (5 passes at most). Returns the scale.
float make_qp(int n, int nmax, const float* x, uint8_t* L, const float* quant_weights) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < 1e-15f) {  // GROUP_MAX_EPS: all zero
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = nmax / max;
  for (int i = 0; i < n; ++i) L[i] = uint8_t(nearest_int(iscale * x[i]));
  const float scale = 1 / iscale;
  float best_mse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * L[i];
    best_mse += quant_weights[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * is + nmax) / max, scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
      const float diff = x[i] - scale_is * l;
      mse += quant_weights[i] * diff * diff;
    }
    if (mse < best_mse) best_mse = mse, iscale = iscale_is;
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(iscale * x[i]));
    L[i] = uint8_t(l);
    const float w = quant_weights[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = quant_weights[i];
      float slx = sumlx - w * x[i] * L[i];
      float sl2 = suml2 - w * L[i] * L[i];
      if (slx > 0 && sl2 > 0) {
        const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = uint8_t(new_l), sumlx = slx, suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Q4_K / Q5_K as llama-quantize --imatrix makes them (ggml-quants.c quantize_row_q4_K_impl /
// _q5_K_impl): each sub-block of 32 by make_qkx3_quants with weights imp·sqrt(σ² + x²), σ² =
// 2·mean x² over the super-block; the 8 scales and the 8 mins each fit by make_qp_quants (6 bits)
// weighted by their sub-blocks' summed weights.
void qk_llama_imatrix(const float* x, const float* imp, int nmax, uint8_t* y) {
  uint8_t L[QK_K], Laux[32], Ls[8], Lm[8];
  float scales[8], mins[8], sw[8], weights[32];
  float sum_x2 = 0;
  for (int l = 0; l < QK_K; ++l) sum_x2 += x[l] * x[l];
  const float sigma2 = 2 * sum_x2 / QK_K;
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) weights[l] = imp[32 * j + l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 32; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = make_qkx3(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
  }
  const float d_block = make_qp(8, 63, scales, Ls, sw), m_block = make_qp(8, 63, mins, Lm, sw);
  for (int j = 0; j < 8; ++j) Ls[j] = std::min<uint8_t>(63, Ls[j]), Lm[j] = std::min<uint8_t>(63, Lm[j]);
  qk_store(x, nmax, Ls, Lm, d_block, m_block, L, y);
}

// One super-block of type t: the reference rule when imp is null, else the importance-weighted
// search.
void kblock(GgmlType t, const float* x, const float* imp, uint8_t* y) {
  if (t == GgmlType::Q6_K)
    q6_k_impl(x, imp, y);
  else if (t == GgmlType::Q2_K)
    q2_k_impl(x, imp, y);
  else if (t == GgmlType::Q3_K)
    q3_k_impl(x, imp, y);
  else
    qk_affine(x, imp, t == GgmlType::Q4_K ? 15 : 31, y);
}

struct KRow {
  GgmlType type;
  void (*deq)(const uint8_t* src, float* dst, size_t nb);
  size_t bytes;  // per super-block
};

const KRow& row_of(GgmlType t) {
  static const KRow rows[] = {{GgmlType::Q2_K, deq_q2_k, 84},
                              {GgmlType::Q3_K, deq_q3_k, 110},
                              {GgmlType::Q4_K, deq_q4_k, 144},
                              {GgmlType::Q5_K, deq_q5_k, 176},
                              {GgmlType::Q6_K, deq_q6_k, 210}};
  for (const KRow& r : rows)
    if (r.type == t) return r;
  return rows[0];  // unreachable: ggml_blocks.cpp calls with the family's types only
}

}  // namespace

// Codes 0..nmax per element as stored (Q3_K: 0..7, the value's q + 4, its bit 2 going to hmask).
void pack_codes_k(GgmlType t, const uint8_t* L, uint8_t* y) {
  // Four 2-bit codes per byte: elements l, l+32, l+64, l+96 of each half (Q2_K, Q3_K).
  auto pack2 = [](const uint8_t* c, uint8_t* qs) {
    for (int j = 0; j < QK_K; j += 128)
      for (int l = 0; l < 32; ++l)
        qs[j / 4 + l] = uint8_t((c[j + l] & 3) | ((c[j + l + 32] & 3) << 2) | ((c[j + l + 64] & 3) << 4) |
                                ((c[j + l + 96] & 3) << 6));
  };
  switch (t) {
    case GgmlType::Q2_K: pack2(L, y + 16); return;
    case GgmlType::Q3_K: {
      uint8_t* hmask = y;
      std::memset(hmask, 0, 32);
      int m = 0;
      uint8_t hm = 1;
      for (int j = 0; j < QK_K; ++j) {
        if (L[j] > 3) hmask[m] = uint8_t(hmask[m] | hm);
        if (++m == QK_K / 8) m = 0, hm = uint8_t(hm << 1);
      }
      pack2(L, y + 32);
      return;
    }
    case GgmlType::Q4_K: {
      uint8_t* q = y + 16;
      for (int j = 0; j < QK_K; j += 64, q += 32)
        for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
      return;
    }
    case GgmlType::Q5_K: {
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
      return;
    }
    default: {  // Q6_K
      uint8_t* ql = y;
      uint8_t* qh = y + 128;
      for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF,
                        q4 = L[j + l + 96] & 0xF;
          ql[l] = uint8_t(q1 | (q3 << 4));
          ql[l + 32] = uint8_t(q2 | (q4 << 4));
          qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                          ((L[j + l + 96] >> 4) << 6));
        }
      }
      return;
    }
  }
}

void dequantize_k(GgmlType t, const uint8_t* src, float* dst, size_t nb) { row_of(t).deq(src, dst, nb); }

// With imp: the reference block and the importance-weighted search's (Q3_K, Q4_K, Q5_K: and
// llama-quantize's --imatrix block, whose weighted error on SmolLM2's ffn_down is below our
// search's); the smallest importance-weighted error of the stored bytes wins.
void quantize_k(GgmlType t, const float* x, const float* imp, uint8_t* y) {
  kblock(t, x, nullptr, y);
  if (!imp) return;
  const KRow& row = row_of(t);
  uint8_t cand[210];
  kblock(t, x, imp, cand);
  auto err = [&](const uint8_t* b) {
    float v[QK_K];
    row.deq(b, v, 1);
    double e = 0;
    for (int j = 0; j < QK_K; ++j) e += double(imp[j]) * (double(x[j]) - v[j]) * (double(x[j]) - v[j]);
    return e;
  };
  if (err(cand) < err(y)) std::memcpy(y, cand, row.bytes);
  if (t == GgmlType::Q3_K) {  // llama-quantize's own --imatrix block is a candidate too
    q3_k_llama_imatrix(x, imp, cand);
    if (err(cand) < err(y)) std::memcpy(y, cand, row.bytes);
  } else if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) {  // and here
    qk_llama_imatrix(x, imp, t == GgmlType::Q4_K ? 15 : 31, cand);
    if (err(cand) < err(y)) std::memcpy(y, cand, row.bytes);
  }
}

}  // namespace qt::ggml
