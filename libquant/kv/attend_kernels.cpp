#include "libquant/kv/attend_kernels.h"

#include "libquant/cpu_features.h"

namespace qt::kv {

namespace {
// kSignTable[b][i] = bit i of b set ? −1 : +1.
struct SignTable {
  float t[256][8];
  SignTable() {
    for (int b = 0; b < 256; ++b)
      for (int i = 0; i < 8; ++i) t[b][i] = (b >> i) & 1 ? -1.0f : 1.0f;
  }
  const float* operator[](int b) const { return t[b]; }
};
const SignTable kSignTable;
}  // namespace

namespace lvl_scalar {
#include "libquant/kv/attend_kernels_impl.inc"
}

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace lvl_avx2 {
#include "libquant/kv/attend_kernels_impl.inc"
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
namespace lvl_avx512 {
#include "libquant/kv/attend_kernels_impl.inc"
}
#pragma GCC pop_options

const AttendKernels& attend_kernels() {
  static const AttendKernels scalar{lvl_scalar::score_tile, lvl_scalar::score_tile2,  lvl_scalar::dot_rows,
                                    lvl_scalar::mix_rows,   lvl_scalar::expand_signs, lvl_scalar::project_rows};
  static const AttendKernels avx2{lvl_avx2::score_tile, lvl_avx2::score_tile2,  lvl_avx2::dot_rows,
                                  lvl_avx2::mix_rows,   lvl_avx2::expand_signs, lvl_avx2::project_rows};
  static const AttendKernels avx512{lvl_avx512::score_tile, lvl_avx512::score_tile2,  lvl_avx512::dot_rows,
                                    lvl_avx512::mix_rows,   lvl_avx512::expand_signs, lvl_avx512::project_rows};
  switch (kernel_level()) {
    case KernelLevel::AMX:
    case KernelLevel::AVX512: return avx512;
    case KernelLevel::AVX2: return avx2;
    default: return scalar;
  }
}

void project_t(const float* x, const float* At, int d, int m, float* y) {
  attend_kernels().project_rows(x, d, 1, At, d, m, y, m);
}

std::vector<float> transposed(const std::vector<float>& a, int rows, int cols) {
  std::vector<float> t(a.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) t[size_t(c) * rows + r] = a[size_t(r) * cols + c];
  return t;
}

}  // namespace qt::kv
