// fit_weighted's candidate scoring, many candidates at once: one SIMD lane per candidate, each lane
// running the scalar loop's operations in the scalar loop's order (no contraction into FMA), so
// every lane's sums are bit for bit those of one scalar pass over the group and the search picks
// the same parameters. Lanes across candidates, not across weights: a group's sums are sequential
// (a vectorised reduction would reorder them).
#pragma once
#include <cstdint>

namespace qt::calib {

// Affine candidates (scale s[c], offset b[c]): codes l = round_half_even(clamp((v − b)/s, 0, nmax))
// by a multiply with 1/s; fp32 sums over the group of w·d², w, w·l, w·l², w·v, w·v·l.
struct AffineSums {
  float err, sw, sl, sl2, sx, sxl;
};
void affine_sums(const float* v, const float* imp, int64_t n, const float* s, const float* b, int count, float nmax,
                 AffineSums* out);

// Symmetric candidates (scale s[c]): q = round_half_even(clamp(v/s, qmin, qmax)); sums of w·d²,
// w·v·q, w·q².
struct SymSums {
  float err, num, den;
};
void sym_sums(const float* v, const float* imp, int64_t n, const float* s, int count, float qmin, float qmax,
              SymSums* out);

}  // namespace qt::calib
