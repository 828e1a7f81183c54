// The row loop of the few-token GEMVs whose weights are computed in registers (lut4_gemv.cpp,
// affine8_gemv.cpp): each row's dot for up to four tokens at once, rows spread over the OpenMP
// threads 16 at a time (dynamic: the rows are arithmetic-bound and a fixed split waits for the
// slowest thread), the bias added.
#pragma once
#include <cstdint>
#include <type_traits>

namespace qt::kernels {

constexpr int kFewTokens = 4;  // tokens a row's dot takes at once

// row_dot(std::integral_constant<int, kM>, r, out): out[0..kM) for row r; m ≤ kFewTokens.
template <class RowDot>
void few_token_rows(int64_t n, int64_t k, int64_t m, const float* bias, float* y, const RowDot& row_dot) {
#pragma omp parallel for schedule(dynamic, 16) if (n * k > (1 << 16))
  for (int64_t r = 0; r < n; ++r) {
    float out[kFewTokens];
    switch (m) {
      case 1: row_dot(std::integral_constant<int, 1>{}, r, out); break;
      case 2: row_dot(std::integral_constant<int, 2>{}, r, out); break;
      case 3: row_dot(std::integral_constant<int, 3>{}, r, out); break;
      default: row_dot(std::integral_constant<int, 4>{}, r, out);
    }
    for (int64_t t = 0; t < m; ++t) y[t * n + r] = out[t] + (bias ? bias[r] : 0.0f);
  }
}

}  // namespace qt::kernels
