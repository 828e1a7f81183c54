// The legacy types' importance-weighted search (ggml_quants_legacy.cpp weighted_block) scores its
// candidate scales many at once: one SIMD lane per candidate, each lane running the scalar loop's
// operations in its order (no FMA contraction), so each candidate's error and refit sums are bit
// for bit those of one scalar pass over the 32-value block, and the search picks the same block.
#pragma once

namespace qt::ggml {

// Symmetric types (q8_0, q4_0, q5_0), candidates d[c] stored as fp16 d16: codes
// q = clamp(round_half_away(x / d16), lo, hi); err = Σ w (x − d16 q)², and the sums of the scale's
// weighted least-squares refit, sxq = Σ w x q and sqq = Σ w q², all in double.
struct SymScore {
  double err, sxq, sqq;
};
void sym_scores(const float* x, const float* w, const float* d, int count, int lo, int hi, SymScore* out);

// Affine types (q4_1, q5_1), candidates (d[c], m[c]) stored as fp16: codes
// q = clamp(round_half_away((x − m16) / d16), 0, nmax); err = Σ w (x − (d16 q + m16))², and the
// (d, m) refit's sums Σ w, Σ w q, Σ w q², Σ w x, Σ w x q.
struct AffScore {
  double err, sw, swq, swqq, swx, swxq;
};
void aff_scores(const float* x, const float* w, const float* d, const float* m, int count, int nmax, AffScore* out);

}  // namespace qt::ggml
