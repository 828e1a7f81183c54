// What the CPU can do, and the level the kernels are allowed to use.
// The level is the highest the CPU has, lowered by QT_KERNEL_LEVEL=scalar|avx2|avx512|amx (env) or
// set_kernel_level() (the --kernel flag, tests), never raised above what the CPU has.
// AMX is AVX512 (with VNNI and BF16) plus the tile GEMMs (bf16 dense, int8 W8A8, affine-4 against
// int8 tokens): every kernel that runs at AVX512 runs at AMX too, so `--kernel avx512` on an AMX
// machine is the tile kernels' A/B switch.
#pragma once
#include <string>
#include <vector>

namespace qt {

enum class KernelLevel { Scalar = 0, AVX2 = 1, AVX512 = 2, AMX = 3 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx_vnni = false;
  // CPUID's AMX bits with the OS saving tile state (XCR0 bits 17, 18); the process's permission to
  // use the tile data (Linux arch_prctl) is asked for by max_kernel_level().
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;
};

const CpuFeatures& cpu_features();
KernelLevel max_kernel_level();                      // what the CPU supports (AVX512 = F+BW+VL+DQ)
KernelLevel kernel_level();                          // what kernels use now
void set_kernel_level(KernelLevel level);            // clamps to max_kernel_level()
std::vector<KernelLevel> available_kernel_levels();  // every level this CPU can run, low to high
const char* kernel_level_name(KernelLevel level);
bool parse_kernel_level(const std::string& s, KernelLevel* out);

}  // namespace qt
