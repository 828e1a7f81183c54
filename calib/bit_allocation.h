// Per-layer bit allocation by reverse water-filling (RateQuant-style; docs/spec/calibration.md
// §Per-layer bit allocation).
//
// Layer i at b_i bits is modelled as distortion w_i · β^(−b_i) (w_i its measured sensitivity,
// β the per-bit decay of the quantizer: 4 in the high-resolution limit, ≈3.5 for Gaussian
// Lloyd-Max). Minimizing Σ w_i β^(−b_i) under mean(b) = b̄ gives
//     b_i = θ + ln w_i / ln β
// with θ (the water level) set so the unclamped layers meet the budget; layers pushed outside
// [b_min, b_max] are clamped and θ recomputed until no new clamps. Integer bits: round, then
// fix the total greedily by marginal gains — add a bit where w β^(−b)(1 − 1/β) is largest,
// remove where w β^(−b)(β − 1) is smallest — moving only between allowed widths.
#pragma once
#include <vector>

namespace qt::calib {

// The continuous solution (clamped to [lo, hi]); mean equals `budget` when lo ≤ budget ≤ hi.
std::vector<double> water_fill(const std::vector<double>& w, double budget, double beta, double lo, double hi);

// Bits from `allowed` (ascending), total = round(budget · n) as nearly as `allowed` permits,
// starting from the continuous solution. Sensitivities must be positive.
std::vector<int> allocate_bits(const std::vector<double>& w, double budget, double beta,
                               const std::vector<int>& allowed);

}  // namespace qt::calib
