// The sum of a ymm's eight floats, for the AVX2 kernels' epilogues (one dot product or row total).
#pragma once
#include <immintrin.h>

namespace qt::kernels {

__attribute__((target("avx2"))) inline float hsum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

}  // namespace qt::kernels
