// ggml's legacy block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (blocks of 32; ggml-common.h layouts).
//
// Dequantization: gguf-py's numpy code (gguf/quants.py) bit for bit, the same operations in the same
// order, all fp32. Quantization: ggml's reference quantizers, restated (not copied) from what
// ggml-quants.c computes: per block of 32, one scale (and a minimum for the _1 types) stored as fp16, the codes from
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

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "formats/ggml_legacy_lanes.h"
#include "formats/ggml_quants_common.h"

namespace qt::ggml {

namespace {

// Q4_0: d * (q - 8); low nibbles are elements 0..15, high nibbles 16..31.
void deq_q4_0(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 18, dst += 32) {
    const float d = h2f(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(int(qs[j] & 0xF) - 8);
      dst[j + 16] = d * float(int(qs[j] >> 4) - 8);
    }
  }
}

// Q4_1: (d * q) + m.
void deq_q4_1(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 20, dst += 32) {
    const float d = h2f(src), m = h2f(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(qs[j] & 0xF) + m;
      dst[j + 16] = d * float(qs[j] >> 4) + m;
    }
  }
}

inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Q5_0: d * (q - 16), the fifth bit of element j is bit j of qh.
void deq_q5_0(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 22, dst += 32) {
    const float d = h2f(src);
    const uint32_t qh = load_u32(src + 2);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < 16; ++j) {
      int lo = (qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
      int hi = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      dst[j] = d * float(lo - 16);
      dst[j + 16] = d * float(hi - 16);
    }
  }
}

// Q5_1: (d * q) + m.
void deq_q5_1(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 24, dst += 32) {
    const float d = h2f(src), m = h2f(src + 2);
    const uint32_t qh = load_u32(src + 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 16; ++j) {
      int lo = (qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
      int hi = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      dst[j] = d * float(lo) + m;
      dst[j + 16] = d * float(hi) + m;
    }
  }
}

// Q8_0: q * d.
void deq_q8_0(const uint8_t* src, float* dst, size_t nb) {
  for (size_t b = 0; b < nb; ++b, src += 34, dst += 32) {
    const float d = h2f(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = float(qs[j]) * d;
  }
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

struct LegacyRow {
  GgmlType type;
  void (*quant)(const float* x, uint8_t* y);  // one block, the reference rule
  void (*deq)(const uint8_t* src, float* dst, size_t nb);
  size_t bytes;  // per block
};

const LegacyRow& row_of(GgmlType t) {
  static const LegacyRow rows[] = {{GgmlType::Q4_0, q4_0, deq_q4_0, 18},
                                   {GgmlType::Q4_1, q4_1, deq_q4_1, 20},
                                   {GgmlType::Q5_0, q5_0, deq_q5_0, 22},
                                   {GgmlType::Q5_1, q5_1, deq_q5_1, 24},
                                   {GgmlType::Q8_0, q8_0, deq_q8_0, 34}};
  for (const LegacyRow& r : rows)
    if (r.type == t) return r;
  return rows[0];  // unreachable: ggml_blocks.cpp calls with the family's types only
}

// ------------------------------------------------------------------ importance-weighted (--imatrix)
//
// A block's parameters chosen to minimise sum_j w_j (x_j - stored_j)^2, w_j
// the importance of the block's input channel j (mean x_j^2 over calibration text, what llama.cpp's
// imatrix holds), instead of the reference rule's absmax / min-max. Candidates (all scored on the
// bytes as stored, decoded by the type's dequantizer; the reference block is always one, so the
// weighted error never exceeds RTN's):
//   symmetric (q8_0, q4_0, q5_0): d = s * (reference d), s in {0.80, 0.82, ..., 1.20}, each coded to
//     nearest and then refit by weighted least squares (d = sum w x q / sum w q^2) and re-coded;
//   affine (q4_1, q5_1): d = (max - min) / (n + delta), m = min, delta in {-1, -0.9, ..., +1}
//     (llama.cpp make_qkx2_quants' grid), each refit by weighted least squares of (d, m) given its
//     codes and re-coded; and llama-quantize's own --imatrix block (quantize_row_q4_1_impl /
//     _q5_1_impl restated: make_qkx3 with weights imp·√(σ² + x²), σ² the row's mean x²; its bytes
//     given the same importances).
// So not llama-quantize --imatrix's bytes where our candidates win; the output is an ordinary
// block of the type.

struct SymSpec {
  int lo, hi;  // code range
  int offset;  // stored nibble/byte = q + offset
  int bits;    // 4, 5, 8
};

// lround(v) without the libm call (it was a fifth of the search's time): v − trunc(v) is exact,
// so comparing it with ±0.5 rounds halves away from zero as lround does. |v| is capped first (the
// codes are clamped to at most ±127 anyway) so the int conversion is defined.
inline int round_away(float v) {
  v = std::clamp(v, -1e9f, 1e9f);
  const int i = int(v);
  const float r = v - float(i);
  return i + (r >= 0.5f) - (r <= -0.5f);
}

// Codes of x under the fp16-stored d (nearest, clamped) into q, and the weighted error
// sum_j w_j (x_j - d16 q_j)^2 of the block they make: the value the type's dequantizer gives
// (d * (stored - offset) = d16 q), so candidates are scored without packing them.
double sym_codes(const float* x, const float* w, float d, const SymSpec& sp, int* q) {
  const float d16 = f16_to_f32(f32_to_f16(d));
  const float id = d16 != 0.0f ? 1.0f / d16 : 0.0f;
  double e = 0;
  for (int j = 0; j < QK; ++j) {
    q[j] = std::clamp(round_away(x[j] * id), sp.lo, sp.hi);
    const float v = d16 * float(q[j]);
    e += double(w[j]) * (double(x[j]) - v) * (double(x[j]) - v);
  }
  return e;
}

// The block of codes q under d, packed into y.
void sym_pack(GgmlType t, float d, const SymSpec& sp, const int* q, uint8_t* y) {
  put_f16(y, d);
  uint8_t u[QK];
  for (int j = 0; j < QK; ++j) u[j] = uint8_t(q[j] + (sp.bits == 8 ? 128 : sp.offset));
  pack_codes_legacy(t, u, y);
}

// The same for the affine types: codes of (x - m16) / d16 in [0, nmax], values (d16 q) + m16.
double aff_codes(const float* x, const float* w, float d, float m, int nmax, int* q) {
  const float d16 = f16_to_f32(f32_to_f16(d)), m16 = f16_to_f32(f32_to_f16(m));
  const float id = d16 != 0.0f ? 1.0f / d16 : 0.0f;
  double e = 0;
  for (int j = 0; j < QK; ++j) {
    q[j] = std::clamp(round_away((x[j] - m16) * id), 0, nmax);
    const float v = d16 * float(q[j]) + m16;
    e += double(w[j]) * (double(x[j]) - v) * (double(x[j]) - v);
  }
  return e;
}

void aff_pack(float d, float m, int bits, const int* q, uint8_t* y) {
  put_f16(y, d);
  put_f16(y + 2, m);
  uint8_t u[QK];
  for (int j = 0; j < QK; ++j) u[j] = uint8_t(q[j]);
  pack_codes_legacy(bits == 4 ? GgmlType::Q4_1 : GgmlType::Q5_1, u, y);
}

// llama-quantize's Q4_1 / Q5_1 block with an imatrix (quantize_row_q4_1_impl / _q5_1_impl): weights
// imp_j·√(σ² + x_j²), σ² the mean x² over the block's row (sigma2).
void affine_llama_block(GgmlType t, const float* x, const float* imp, float sigma2, uint8_t* y) {
  const int nmax = t == GgmlType::Q4_1 ? 15 : 31;
  float weight[QK];
  uint8_t L[QK], Laux[QK];
  for (int j = 0; j < QK; ++j) weight[j] = imp[j] * std::sqrt(sigma2 + x[j] * x[j]);
  float mn;
  const float d = make_qkx3(QK, nmax, x, weight, L, &mn, Laux, -0.9f, 0.05f, 36);
  put_f16(y, d);
  put_f16(y + 2, -mn);
  pack_codes_legacy(t, L, y);
}

double block_error(const LegacyRow& row, const uint8_t* y, const float* x, const float* w) {
  float v[QK];
  row.deq(y, v, 1);
  double e = 0;
  for (int j = 0; j < QK; ++j) e += double(w[j]) * (double(x[j]) - v[j]) * (double(x[j]) - v[j]);
  return e;
}

void weighted_block(GgmlType t, const float* x, const float* w, float sigma2, uint8_t* y) {
  const LegacyRow& row = row_of(t);
  row.quant(x, y);  // the reference block
  double best = block_error(row, y, x, w);
  int q[QK];
  // Each stage's candidates are scored together (ggml_legacy_lanes.h), then compared in the search's
  // order: every grid candidate followed by its refit; the winner alone is coded and packed.
  constexpr int kGrid = 21;
  if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1) {
    const int nmax = t == GgmlType::Q4_1 ? 15 : 31, bits = t == GgmlType::Q4_1 ? 4 : 5;
    float mn, mx;
    min_max(x, &mn, &mx);
    if (mx == mn) return;
    float d[kGrid], m[kGrid], rd[kGrid], rm[kGrid];
    int refit_of[kGrid], nr = 0;
    for (int k = -10; k <= 10; ++k) d[k + 10] = (mx - mn) / (nmax + 0.1f * k), m[k + 10] = mn;
    AffScore a[kGrid], r[kGrid];
    aff_scores(x, w, d, m, kGrid, nmax, a);
    for (int i = 0; i < kGrid; ++i) {
      refit_of[i] = -1;
      const AffScore& s = a[i];
      const double det = s.sw * s.swqq - s.swq * s.swq;
      if (det <= 0) continue;
      const double dd = (s.sw * s.swxq - s.swq * s.swx) / det, mm = (s.swqq * s.swx - s.swq * s.swxq) / det;
      if (!(dd > 0)) continue;
      rd[nr] = float(dd), rm[nr] = float(mm), refit_of[i] = nr++;
    }
    aff_scores(x, w, rd, rm, nr, nmax, r);
    float bd = 0, bm = 0;
    bool won = false;
    for (int i = 0; i < kGrid; ++i) {
      if (a[i].err < best) best = a[i].err, bd = d[i], bm = m[i], won = true;
      if (refit_of[i] >= 0 && r[refit_of[i]].err < best)
        best = r[refit_of[i]].err, bd = rd[refit_of[i]], bm = rm[refit_of[i]], won = true;
    }
    if (won) {
      aff_codes(x, w, bd, bm, nmax, q);
      aff_pack(bd, bm, bits, q, y);
    }
    uint8_t ly[24];  // llama-quantize's own --imatrix block is a candidate too
    affine_llama_block(t, x, w, sigma2, ly);
    if (block_error(row, ly, x, w) < best) std::memcpy(y, ly, size_t(row.bytes));
    return;
  }
  const SymSpec sp = t == GgmlType::Q8_0   ? SymSpec{-127, 127, 0, 8}
                     : t == GgmlType::Q4_0 ? SymSpec{-8, 7, 8, 4}
                                           : SymSpec{-16, 15, 16, 5};
  const float d_ref = t == GgmlType::Q8_0 ? [&] {
    float a = 0;
    for (int j = 0; j < QK; ++j) a = std::max(a, std::fabs(x[j]));
    return a / 127.0f;
  }() : signed_absmax(x) / float(sp.lo);
  if (d_ref == 0.0f) return;
  float d[kGrid], rd[kGrid];
  int refit_of[kGrid], nr = 0;
  for (int k = -10; k <= 10; ++k) d[k + 10] = d_ref * (1.0f + 0.02f * k);
  SymScore a[kGrid], r[kGrid];
  sym_scores(x, w, d, kGrid, sp.lo, sp.hi, a);
  for (int i = 0; i < kGrid; ++i) {
    refit_of[i] = -1;
    if (a[i].sqq <= 0) continue;
    rd[nr] = float(a[i].sxq / a[i].sqq), refit_of[i] = nr++;
  }
  sym_scores(x, w, rd, nr, sp.lo, sp.hi, r);
  float bd = 0;
  bool won = false;
  for (int i = 0; i < kGrid; ++i) {
    if (a[i].err < best) best = a[i].err, bd = d[i], won = true;
    if (refit_of[i] >= 0 && r[refit_of[i]].err < best) best = r[refit_of[i]].err, bd = rd[refit_of[i]], won = true;
  }
  if (won) {
    sym_codes(x, w, bd, sp, q);
    sym_pack(t, bd, sp, q, y);
  }
}

}  // namespace

float make_qkx3(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max <= min) {
    std::memset(L, 0, size_t(n));
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_mad = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    const float diff = scale * L[i] + min - x[i];
    best_mad += weights[i] * (diff * diff);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float mad = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * Laux[i] + this_min - x[i];
        mad += weights[i] * (diff * diff);
      }
      if (mad < best_mad) {
        std::memcpy(L, Laux, size_t(n));
        best_mad = mad;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

void pack_codes_legacy(GgmlType t, const uint8_t* L, uint8_t* y) {
  switch (t) {
    case GgmlType::Q8_0:
      for (int j = 0; j < QK; ++j) y[2 + j] = uint8_t(int(L[j]) - 128);
      return;
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
      uint8_t* qs = y + (t == GgmlType::Q4_0 ? 2 : 4);
      for (int j = 0; j < QK / 2; ++j) qs[j] = uint8_t(L[j] | (L[j + QK / 2] << 4));
      return;
    }
    case GgmlType::Q5_0: pack5(L, y + 2, y + 6); return;
    default: pack5(L, y + 4, y + 8); return;  // Q5_1
  }
}

void dequantize_legacy(GgmlType t, const uint8_t* src, float* dst, size_t nb) { row_of(t).deq(src, dst, nb); }

void quantize_legacy(GgmlType t, const float* x, const float* imp, uint8_t* y) {
  if (!imp) return row_of(t).quant(x, y);
  float s = 0;
  for (int j = 0; j < QK; ++j) s += x[j] * x[j];
  weighted_block(t, x, imp, s / QK, y);
}

void quantize_legacy_in_row(GgmlType t, const float* x, const float* imp, float sigma2, uint8_t* y) {
  weighted_block(t, x, imp, sigma2, y);
}

}  // namespace qt::ggml
