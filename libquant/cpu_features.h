// What the CPU can do, and the level the kernels are allowed to use.
// The level is the highest the CPU has, lowered by QT_KERNEL_LEVEL=scalar|avx2|avx512 (env) or
// set_kernel_level() (the --kernel flag, tests), never raised above what the CPU has.
#pragma once
#include <string>
#include <vector>

namespace qt {

enum class KernelLevel { Scalar = 0, AVX2 = 1, AVX512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx_vnni = false;
};

const CpuFeatures& cpu_features();
KernelLevel max_kernel_level();                      // what the CPU supports (AVX512 = F+BW+VL+DQ)
KernelLevel kernel_level();                          // what kernels use now
void set_kernel_level(KernelLevel level);            // clamps to max_kernel_level()
std::vector<KernelLevel> available_kernel_levels();  // every level this CPU can run, low to high
const char* kernel_level_name(KernelLevel level);
bool parse_kernel_level(const std::string& s, KernelLevel* out);

}  // namespace qt
