#include "libquant/cpu_features.h"

#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace qt {

namespace {

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool osxsave = c & (1u << 27);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (unsigned long long)hi << 32 | lo;
  }
  bool ymm = (xcr0 & 0x6) == 0x6;
  bool zmm = (xcr0 & 0xe6) == 0xe6;
  f.f16c = f.f16c && ymm;
  f.fma = f.fma && ymm;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned max_subleaf = a;
  f.avx2 = ymm && (b & (1u << 5));
  f.avx512f = zmm && (b & (1u << 16));
  f.avx512dq = zmm && (b & (1u << 17));
  f.avx512bw = zmm && (b & (1u << 30));
  f.avx512vl = zmm && (b & (1u << 31));
  f.avx512_vnni = zmm && (c & (1u << 11));
  const bool tiles = (xcr0 & 0x60000) == 0x60000;  // XTILECFG, XTILEDATA
  f.amx_bf16 = tiles && (d & (1u << 22));
  f.amx_tile = tiles && (d & (1u << 24));
  f.amx_int8 = tiles && (d & (1u << 25));
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (max_subleaf >= 1) __cpuid_count(7, 1, a1, b1, c1, d1);
  f.avx512_bf16 = zmm && (a1 & (1u << 5));
  f.avx_vnni = ymm && (a1 & (1u << 4));
  return f;
}

// Linux keeps the 8 KiB tile data out of a thread's signal frame and context until the process asks
// for it (arch/x86/include/uapi/asm/prctl.h: ARCH_REQ_XCOMP_PERM; XFEATURE_XTILEDATA = 18); a tile
// instruction before that faults. Granted for the whole process, threads to come included.
bool request_tile_permission() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

KernelLevel detect_max() {
  const auto& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma) {
    if (f.avx512_vnni && f.avx512_bf16 && f.amx_tile && f.amx_int8 && f.amx_bf16 && request_tile_permission())
      return KernelLevel::AMX;
    return KernelLevel::AVX512;
  }
  if (f.avx2 && f.fma && f.f16c) return KernelLevel::AVX2;
  return KernelLevel::Scalar;
}

KernelLevel initial_level() {
  KernelLevel lvl = detect_max();
  if (const char* e = std::getenv("QT_KERNEL_LEVEL"); e && *e) {
    KernelLevel want;
    if (!parse_kernel_level(e, &want))
      std::fprintf(stderr, "warning: QT_KERNEL_LEVEL=%s is not one of scalar, avx2, avx512, amx; ignored\n", e);
    else if (want < lvl)
      lvl = want;
  }
  return lvl;
}

// A function-local static, so that a kernel built during another file's static
// initialisation still sees the CPU's level.
std::atomic<int>& level_ref() {
  static std::atomic<int> level{int(initial_level())};
  return level;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static CpuFeatures f = detect();
  return f;
}

KernelLevel max_kernel_level() {
  static KernelLevel m = detect_max();
  return m;
}

KernelLevel kernel_level() { return KernelLevel(level_ref().load(std::memory_order_relaxed)); }

void set_kernel_level(KernelLevel level) {
  level_ref().store(int(level > max_kernel_level() ? max_kernel_level() : level), std::memory_order_relaxed);
}

std::vector<KernelLevel> available_kernel_levels() {
  std::vector<KernelLevel> v;
  for (int i = 0; i <= int(max_kernel_level()); ++i) v.push_back(KernelLevel(i));
  return v;
}

const char* kernel_level_name(KernelLevel level) {
  switch (level) {
    case KernelLevel::Scalar: return "scalar";
    case KernelLevel::AVX2: return "avx2";
    case KernelLevel::AVX512: return "avx512";
    case KernelLevel::AMX: return "amx";
  }
  return "?";
}

bool parse_kernel_level(const std::string& s, KernelLevel* out) {
  if (s == "scalar")
    *out = KernelLevel::Scalar;
  else if (s == "avx2")
    *out = KernelLevel::AVX2;
  else if (s == "avx512")
    *out = KernelLevel::AVX512;
  else if (s == "amx")
    *out = KernelLevel::AMX;
  else
    return false;
  return true;
}

}  // namespace qt
