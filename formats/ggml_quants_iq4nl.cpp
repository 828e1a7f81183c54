// ggml's IQ4_NL and IQ4_XS (ggml-common.h block_iq4_nl, block_iq4_xs): blocks of 32 on a
// non-uniform 4-bit grid, IQ4_XS grouping 8 of them under one fp16 scale with 6-bit sub-scales.
// Dequantization is gguf-py's (gguf/quants.py) bit for bit; quantization is llama.cpp's rule
// (iq4_llama) or our search (below), as each says. No FMA contraction (numpy and ggml-base never
// fuse).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>
#include <cstring>

#include "formats/ggml_quants_common.h"

namespace qt::ggml {

namespace {

// IQ4_NL (block_iq4_nl {f16 d; u8 qs[16]} = 18 bytes, nibbles as q4_0): d * kvalues[nibble].
void deq_iq4_nl(const uint8_t* src, float* dst, size_t nb) {
  const int8_t* kv = kIq4nl;
  for (size_t b = 0; b < nb; ++b, src += 18, dst += 32) {
    const float d = h2f(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(kv[qs[j] & 0xF]);
      dst[j + 16] = d * float(kv[qs[j] >> 4]);
    }
  }
}

// IQ4_XS: blocks of 256 in 8 sub-blocks of 32, each d * (ls - 32) * kvalues[nibble], ls a 6-bit
// sub-scale (ggml-common.h block_iq4_xs {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]} = 136
// bytes: ls = low nibble from scales_l, 2 high bits from scales_h).
void deq_iq4_xs(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 136) {
    const float d = h2f(src);
    const uint16_t sh = uint16_t(src[2] | (src[3] << 8));
    for (int ib = 0; ib < QK_K / 32; ++ib, dst += 32) {
      const int ls = ((src[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
      const float dl = d * float(ls - 32);
      const uint8_t* qs = src + 8 + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        dst[j] = dl * float(kIq4nl[qs[j] & 0xF]);
        dst[j + 16] = dl * float(kIq4nl[qs[j] >> 4]);
      }
    }
  }
}

// ggml-quants.c best_index_int8 over the table: the nearest value's index (ties: the upper).
inline int best_index(float x) {
  if (x <= kIq4nl[0]) return 0;
  if (x >= kIq4nl[15]) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < kIq4nl[mav])
      mu = mav;
    else
      ml = mav;
  }
  return x - kIq4nl[mu - 1] < kIq4nl[mu] - x ? mu - 1 : mu;
}

// llama.cpp's rule (ggml-quants.c quantize_row_iq4_nl_impl, the same fp32 operations in the same
// order) for one block of n = 32 (IQ4_NL) or 256 (IQ4_XS) values: per sub-block of 32, the scale
// max/127 refit by weighted least squares, then 2*ntry+1 more scales (itry - 127)/max refit the
// same way, the best kept; IQ4_XS then stores the sub-scales as 6-bit multiples of
// d = -max_scale/32 and re-codes. Search weights x^2, or with an importance qw[j] * sqrt(sigma^2 +
// x^2), sigma^2 = 2 * mean x^2 (llama-quantize --imatrix).
void iq4_llama(int n, const float* x, const float* qw, int ntry, uint8_t* y) {
  float sigma2 = 0;
  for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / float(n);
  float scales[QK_K / 32], weight[32];
  uint8_t L[QK_K];
  std::memset(L, 0, sizeof L);
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < n / 32; ++ib) {
    const float* xb = x + 32 * ib;
    uint8_t* Lb = L + 32 * ib;
    for (int j = 0; j < 32; ++j) weight[j] = qw ? qw[32 * ib + j] * std::sqrt(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(xb[j]) > amax) amax = std::fabs(xb[j]), max = xb[j];
    if (amax < 1e-15f) {  // GROUP_MAX_EPS
      scales[ib] = 0;
      continue;
    }
    float d = ntry > 0 ? -max / float(kIq4nl[0]) : max / float(kIq4nl[0]);
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const int l = best_index(id * xb[j]);
      Lb[j] = uint8_t(l);
      const float q = kIq4nl[l], w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
      id = float(itry + kIq4nl[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < 32; ++j) {
        const float q = kIq4nl[best_index(id * xb[j])], w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) d = sumqx / sumq2, best = d * sumqx;
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) amax_scale = std::fabs(d), max_scale = d;
  }
  uint8_t* qs;
  if (n == QK_K) {
    const float d = -max_scale / 32;
    put_f16(y, d);
    const float id = d != 0.0f ? 1 / d : 0.f;
    uint16_t sh = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
      const float dl = d * float(l), idl = dl != 0.0f ? 1 / dl : 0.f;
      for (int j = 0; j < 32; ++j) L[32 * ib + j] = uint8_t(best_index(idl * x[32 * ib + j]));
      l += 32;
      if (ib % 2 == 0)
        y[4 + ib / 2] = uint8_t(l & 0xF);
      else
        y[4 + ib / 2] |= uint8_t((l & 0xF) << 4);
      sh |= uint16_t((l >> 4) << (2 * ib));
    }
    y[2] = uint8_t(sh & 0xFF), y[3] = uint8_t(sh >> 8);
    qs = y + 8;
  } else {
    put_f16(y, scales[0]);
    if (ntry > 0) {
      const float id = scales[0] != 0.0f ? 1 / scales[0] : 0.f;
      for (int j = 0; j < 32; ++j) L[j] = uint8_t(best_index(id * x[j]));
    }
    qs = y + 2;
  }
  for (int i = 0; i < n / 32; ++i)
    for (int j = 0; j < 16; ++j) qs[16 * i + j] = uint8_t(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

// IQ4_NL, ours (not byte-compatible with llama.cpp's iq4_llama above, and not meant to be): for
// each candidate scale d = s * max / -127, s in {0.90, 0.92, ..., 1.10} (s = 1 maps the value of
// largest magnitude onto the table's end, -127), code every element to the nearest table value of
// x / d, refit d by least squares given those codes (sum x*v / sum v*v), re-code, and keep the
// candidate whose error sum (x - d * v)^2 is smallest with d as stored (fp16 for IQ4_NL; exact
// for an IQ4_XS sub-block, whose stored form is chosen afterwards). s = 1 alone is the RTN rule;
// the search never does worse than it.

// Index of the table value nearest to v (ties: the lower): how many midpoints between
// neighbours lie strictly below v. Branch-free, so the per-element loop vectorizes.
constexpr float kIq4Mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                               7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};
inline int iq4_nearest(float v) {
  int n = 0;
  for (float m : kIq4Mid) n += v > m;
  return n;
}

// Weighted error of the 32 values under scale d (rounded to fp16 first when f16) when coded to the
// nearest values (w null: all weights 1); codes out.
inline double iq4_code(const float* x, const float* w, float d, bool f16, uint8_t* q) {
  const float ds = f16 ? f16_to_f32(f32_to_f16(d)) : d;
  const float id = ds != 0.0f ? 1.0f / ds : 0.0f;
  double err = 0;
  for (int j = 0; j < QK; ++j) {
    q[j] = uint8_t(iq4_nearest(x[j] * id));
    const double e = double(x[j]) - double(ds * float(kIq4nl[q[j]]));
    err += (w ? double(w[j]) : 1.0) * e * e;
  }
  return err;
}

// The search above for one block of 32: the best scale (0 for an all-zero block) and its codes.
float iq4_search(const float* x, const float* w, bool f16, uint8_t* best_q) {
  const float max = signed_absmax(x);
  uint8_t q[QK];
  std::memset(best_q, 0, QK);
  float best_d = 0.0f;
  if (max == 0.0f) return 0.0f;
  double best_err = 1e300;
  for (int k = -5; k <= 5; ++k) {
    float d = (1.0f + 0.02f * k) * max / -127.0f;
    for (int pass = 0; pass < 2; ++pass) {
      const double err = iq4_code(x, w, d, f16, q);
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
  return best_d;
}

void iq4_nl_search(const float* x, const float* w, uint8_t* y) {
  uint8_t q[QK];
  put_f16(y, iq4_search(x, w, true, q));
  for (int j = 0; j < QK / 2; ++j) y[2 + j] = uint8_t(q[j] | (q[j + QK / 2] << 4));
}

// Importance-weighted squared error of `nb` stored blocks of `t` against x.
double iq4_block_error(GgmlType t, const float* x, const float* w, const uint8_t* y) {
  const int n = t == GgmlType::IQ4_XS ? QK_K : QK;
  float r[QK_K];
  if (n == QK_K)
    deq_iq4_xs(y, r, 1);
  else
    deq_iq4_nl(y, r, 1);
  double err = 0;
  for (int j = 0; j < n; ++j) err += double(w[j]) * (double(x[j]) - r[j]) * (double(x[j]) - r[j]);
  return err;
}

// IQ4_XS with importances w, ours: each sub-block's best exact scale by the search above; then
// for super-scales d = -m / k (m the sub-scale of largest magnitude, k in 28..32 by halves: k = 32
// is llama.cpp's choice) stored as fp16, each sub-block's 6-bit multiple l of d among round(s/d)
// and its neighbours with the least weighted error once re-coded; the best d wins.
void iq4_xs_search(const float* x, const float* w, uint8_t* y) {
  float s[QK_K / 32], m = 0;
  uint8_t q[QK];
  for (int ib = 0; ib < QK_K / 32; ++ib) {
    s[ib] = iq4_search(x + 32 * ib, w + 32 * ib, false, q);
    if (std::fabs(s[ib]) > std::fabs(m)) m = s[ib];
  }
  std::memset(y, 0, 136);
  if (m == 0.0f) return;
  double best_err = 1e300;
  for (int k2 = 56; k2 <= 64; ++k2) {
    const float d = f16_to_f32(f32_to_f16(-m / (0.5f * float(k2))));
    if (d == 0.0f) continue;
    uint8_t cand[136] = {};
    put_f16(cand, d);
    uint16_t sh = 0;
    double err = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const float* xb = x + 32 * ib;
      const float* wb = w + 32 * ib;
      const int l0 = nearest_int(s[ib] / d);
      double be = 1e300;
      int bl = 0;
      uint8_t bq[QK] = {};
      for (int l = std::max(-32, l0 - 1); l <= std::min(31, l0 + 1); ++l) {
        const double e = iq4_code(xb, wb, d * float(l), false, q);
        if (e < be) be = e, bl = l, std::memcpy(bq, q, QK);
      }
      if (be == 1e300) {  // l0 outside [-33, 32]: cannot happen for k <= 32; keep the block valid
        bl = 0, be = iq4_code(xb, wb, 0.0f, false, bq);
      }
      err += be;
      const int ls = bl + 32;
      cand[4 + ib / 2] |= uint8_t((ls & 0xF) << (4 * (ib % 2)));
      sh |= uint16_t((ls >> 4) << (2 * ib));
      for (int j = 0; j < 16; ++j) cand[8 + 16 * ib + j] = uint8_t(bq[j] | (bq[j + 16] << 4));
    }
    cand[2] = uint8_t(sh & 0xFF), cand[3] = uint8_t(sh >> 8);
    if (err < best_err) best_err = err, std::memcpy(y, cand, 136);
  }
}

// With importances, IQ4_NL and IQ4_XS: the least weighted error among the plain rule's block
// (IQ4_NL: our search, IQ4_XS: llama.cpp's), llama-quantize's --imatrix block (its rule with the
// importances; on SmolLM2 its IQ4_NL blocks have 4-19% less weighted error than our search alone,
// which only tries negative scales) and our search's with the importances.
void iq4_weighted(GgmlType t, const float* x, const float* w, uint8_t* y) {
  const bool xs = t == GgmlType::IQ4_XS;
  const int n = xs ? QK_K : QK, bytes = xs ? 136 : 18;
  if (xs)
    iq4_llama(QK_K, x, nullptr, 7, y);
  else
    iq4_nl_search(x, nullptr, y);
  double best = iq4_block_error(t, x, w, y);
  uint8_t cand[136];
  iq4_llama(n, x, w, 7, cand);
  double e = iq4_block_error(t, x, w, cand);
  if (e < best) best = e, std::memcpy(y, cand, bytes);
  if (xs)
    iq4_xs_search(x, w, cand);
  else
    iq4_nl_search(x, w, cand);
  e = iq4_block_error(t, x, w, cand);
  if (e < best) std::memcpy(y, cand, bytes);
}

}  // namespace

// Code indices 0..15 into the block's nibbles, each 32-value (sub-)block's first 16 low, last 16
// high (ggml-common.h block_iq4_nl {f16 d; qs[16]}, block_iq4_xs {f16 d; u16 scales_h; scales_l[4];
// qs[128]}); the scale fields are left as they are.
void pack_codes_iq4_nl(GgmlType t, const uint8_t* L, uint8_t* y) {
  const int subs = t == GgmlType::IQ4_XS ? QK_K / QK : 1, at = t == GgmlType::IQ4_XS ? 8 : 2;
  for (int ib = 0; ib < subs; ++ib)
    for (int j = 0; j < QK / 2; ++j) y[at + 16 * ib + j] = uint8_t(L[QK * ib + j] | (L[QK * ib + j + QK / 2] << 4));
}

// t is IQ4_NL or IQ4_XS. IQ4_XS without importances is llama.cpp's rule, so its bytes are
// llama-quantize's; IQ4_NL's plain rule is our search (llama.cpp's: quantize_iq4_nl_llama).
void dequantize_iq4_nl(GgmlType t, const uint8_t* src, float* dst, size_t nb) {
  if (t == GgmlType::IQ4_XS)
    deq_iq4_xs(src, dst, nb);
  else
    deq_iq4_nl(src, dst, nb);
}
void quantize_iq4_nl(GgmlType t, const float* x, const float* imp, uint8_t* y) {
  if (imp)
    iq4_weighted(t, x, imp, y);
  else if (t == GgmlType::IQ4_XS)
    iq4_llama(QK_K, x, nullptr, 7, y);
  else
    iq4_nl_search(x, nullptr, y);
}
void quantize_iq4_nl_llama(const float* x, uint8_t* y) { iq4_llama(QK, x, nullptr, 7, y); }

}  // namespace qt::ggml
