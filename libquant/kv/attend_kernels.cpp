#include "libquant/kv/attend_kernels.h"

#include "libquant/cpu_features.h"

namespace qt::kv {

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
  static const AttendKernels scalar{lvl_scalar::score_tile, lvl_scalar::dot_rows, lvl_scalar::mix_rows};
  static const AttendKernels avx2{lvl_avx2::score_tile, lvl_avx2::dot_rows, lvl_avx2::mix_rows};
  static const AttendKernels avx512{lvl_avx512::score_tile, lvl_avx512::dot_rows, lvl_avx512::mix_rows};
  switch (kernel_level()) {
    case KernelLevel::AVX512: return avx512;
    case KernelLevel::AVX2: return avx2;
    default: return scalar;
  }
}

}  // namespace qt::kv
