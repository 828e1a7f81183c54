// Lloyd-Max scalar quantizer fitted to samples (docs/spec/lloyd-max.md §Algorithm on the
// empirical distribution):
// the 1-D k-means of the sample, started from the unit-Gaussian Lloyd-Max table (the samples are
// standardized coordinates, so that start is close), thresholds at the midpoints, centroids the
// means of their cells (in double, over the sorted samples), until no centroid moves by more than
// 1e-7 or 200 iterations. A cell left empty keeps its centroid. Deterministic: no randomness.
#pragma once
#include <vector>

#include "libquant/kv/lloyd_max.h"

namespace qt::calib {

// `levels` centroids (ascending) for the samples; mse = the mean squared error on them.
kv::Codebook lloyd_max_empirical(std::vector<float> samples, int levels);

}  // namespace qt::calib
