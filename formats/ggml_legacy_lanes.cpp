#pragma GCC optimize("fp-contract=off")  // each lane computes exactly the scalar loop's roundings
#include "formats/ggml_legacy_lanes.h"

#include <algorithm>

#include "formats/tensor.h"

namespace qt::ggml {

namespace {

constexpr int kQK = 32;  // values per block of every legacy type
constexpr int kLanes = 8;
typedef float F __attribute__((vector_size(4 * kLanes)));
typedef int I __attribute__((vector_size(4 * kLanes)));
typedef double D __attribute__((vector_size(8 * kLanes)));

// (Macros, not helper functions: a helper returning a vector would be a separate baseline-ABI
// function, not code of each target clone.)
// lround of v clamped to ±1e9 (as the scalar round_away): truncate, then step away from zero when
// the dropped part is at least one half; vector comparisons are −1 where true.
#define QT_ROUND_AWAY(v, out)                                     \
  do {                                                            \
    const F c_ = (v) < -1e9f ? -1e9f : (1e9f < (v) ? 1e9f : (v)); \
    const I i_ = __builtin_convertvector(c_, I);                  \
    const F r_ = c_ - __builtin_convertvector(i_, F);             \
    out = i_ - (I)(r_ >= 0.5f) + (I)(r_ <= -0.5f);                \
  } while (0)
#define QT_CLAMP(q, lo, hi) ((q) < (lo) ? (lo) : ((hi) < (q) ? (hi) : (q)))

// The fp16-stored value of each candidate's d and its reciprocal (0 for a zero scale).
void stored(const float* d, int c0, int m, F* d16, F* id) {
  for (int i = 0; i < kLanes; ++i) {
    const float s = f16_to_f32(f32_to_f16(i < m ? d[c0 + i] : 1.0f));
    (*d16)[i] = s, (*id)[i] = s != 0.0f ? 1.0f / s : 0.0f;
  }
}

}  // namespace

__attribute__((target_clones("avx512f", "avx2", "default"))) void sym_scores(const float* x, const float* w,
                                                                             const float* d, int count, int lo, int hi,
                                                                             SymScore* out) {
  for (int c0 = 0; c0 < count; c0 += kLanes) {
    const int m = std::min(kLanes, count - c0);
    F d16, id;
    stored(d, c0, m, &d16, &id);
    const I vlo = I{} + lo, vhi = I{} + hi;
    D err = {}, sxq = {}, sqq = {};
    for (int j = 0; j < kQK; ++j) {
      I q;
      QT_ROUND_AWAY(x[j] * id, q);
      q = QT_CLAMP(q, vlo, vhi);
      const F qf = __builtin_convertvector(q, F);
      const D qd = __builtin_convertvector(q, D), diff = double(x[j]) - __builtin_convertvector(d16 * qf, D);
      const double wj = w[j];
      err += wj * diff * diff;
      sxq += wj * x[j] * qd, sqq += wj * qd * qd;
    }
    for (int i = 0; i < m; ++i) out[c0 + i] = {err[i], sxq[i], sqq[i]};
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void aff_scores(const float* x, const float* w,
                                                                             const float* d, const float* mn, int count,
                                                                             int nmax, AffScore* out) {
  for (int c0 = 0; c0 < count; c0 += kLanes) {
    const int m = std::min(kLanes, count - c0);
    F d16, id, m16;
    stored(d, c0, m, &d16, &id);
    for (int i = 0; i < kLanes; ++i) m16[i] = f16_to_f32(f32_to_f16(i < m ? mn[c0 + i] : 0.0f));
    const I vlo = I{}, vhi = I{} + nmax;
    D err = {}, sw = {}, swq = {}, swqq = {}, swx = {}, swxq = {};
    for (int j = 0; j < kQK; ++j) {
      I q;
      QT_ROUND_AWAY((x[j] - m16) * id, q);
      q = QT_CLAMP(q, vlo, vhi);
      const F qf = __builtin_convertvector(q, F);
      const D qd = __builtin_convertvector(q, D), diff = double(x[j]) - __builtin_convertvector(d16 * qf + m16, D);
      const double wj = w[j];
      err += wj * diff * diff;
      sw += wj, swq += wj * qd, swqq += wj * qd * qd, swx += wj * x[j], swxq += wj * x[j] * qd;
    }
    for (int i = 0; i < m; ++i) out[c0 + i] = {err[i], sw[i], swq[i], swqq[i], swx[i], swxq[i]};
  }
}

}  // namespace qt::ggml
