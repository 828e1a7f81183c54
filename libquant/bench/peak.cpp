// Peak microbenchmarks. Every loop keeps 12 independent accumulators: Zen 4 retires one 512-bit
// FMA / VDPBF16PS / VPDPBUSD per cycle with 4–6 cycles latency, so ≥ 6 chains are needed and 12
// leave margin (Intel's two 512-bit FMA ports with 4-cycle latency need 8).
// A run is repeated and the best kept: these machines are shared, so the best run is the one
// least disturbed by others.
#include "libquant/bench/peak.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <vector>

#include <sys/mman.h>

#include "libquant/cpu_features.h"
#include "libquant/kernels/amx_peak.h"

#define QT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define QT_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define QT_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define QT_AVXVNNI __attribute__((target("avx2,avxvnni")))
#define QT_AVX2 __attribute__((target("avx2,fma")))

namespace qt::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kChains = 12;
constexpr int kRepeats = 5;

// Each kernel runs `iters` iterations of kChains independent instructions and returns a value
// that depends on every chain (so nothing is optimised away).

QT_AVX512 float loop_fma512(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-3f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, c);
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

QT_AVX2 float loop_fma256(int64_t iters) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-3f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], b, c);
  __m256 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}

QT_AVX512BF16 float loop_bf16(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(3e-3f), _mm512_set1_ps(1e-3f));
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

QT_AVX512VNNI float loop_vnni512(int64_t iters) {
  __m512i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  __m512i s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_epi32(s, acc[i]);
  return float(_mm512_reduce_add_epi32(s));
}

QT_AVXVNNI float loop_vnni256(int64_t iters) {
  __m256i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_epi32(i);
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], a, b);
  __m256i s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_epi32(s, acc[i]);
  return float(_mm256_extract_epi32(s, 0));
}

// Sum of the 64-byte lines of [p, p+bytes) with 8 independent adds in flight.
QT_AVX512 uint64_t read512(const char* p, size_t bytes) {
  __m512i acc[8];
  for (auto& a : acc) a = _mm512_setzero_si512();
  for (size_t off = 0; off + 512 <= bytes; off += 512)
    for (int i = 0; i < 8; ++i) acc[i] = _mm512_add_epi64(acc[i], _mm512_load_si512(p + off + 64 * i));
  for (int i = 1; i < 8; ++i) acc[0] = _mm512_add_epi64(acc[0], acc[i]);
  return uint64_t(_mm512_reduce_add_epi64(acc[0]));
}

QT_AVX2 uint64_t read256(const char* p, size_t bytes) {
  __m256i acc[8];
  for (auto& a : acc) a = _mm256_setzero_si256();
  for (size_t off = 0; off + 256 <= bytes; off += 256)
    for (int i = 0; i < 8; ++i)
      acc[i] = _mm256_add_epi64(acc[i], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + off + 32 * i)));
  for (int i = 1; i < 8; ++i) acc[0] = _mm256_add_epi64(acc[0], acc[i]);
  return uint64_t(_mm256_extract_epi64(acc[0], 0));
}

uint64_t read_scalar(const char* p, size_t bytes) {
  uint64_t s[4] = {};
  for (size_t off = 0; off + 32 <= bytes; off += 32)
    for (int i = 0; i < 4; ++i) {
      uint64_t v;
      std::memcpy(&v, p + off + 8 * i, 8);
      s[i] += v;
    }
  return s[0] + s[1] + s[2] + s[3];
}

volatile float g_sink;
volatile uint64_t g_sink64;

// Wall time of `threads` threads each running work(thread id), after a barrier: the best of
// kRepeats runs, or the median when `median` (memory, where a lucky run can hit a cache).
double time_threads(int threads, const std::function<void(int)>& work, bool median = false) {
  std::vector<double> times;
  for (int r = 0; r < kRepeats; ++r) {
    Clock::time_point t0;
#pragma omp parallel num_threads(threads)
    {
#pragma omp barrier
#pragma omp master
      t0 = Clock::now();
#pragma omp barrier
      work(omp_get_thread_num());
    }
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return median ? times[times.size() / 2] : times.front();
}

// Runs a compute loop: picks the iteration count for ~`seconds` on one thread, then measures
// 1..max_threads threads. ops_per_iter counts the work of one iteration (kChains instructions).
PeakResult run_compute(const char* name, const char* unit, const char* isa, double ops_per_iter, float (*loop)(int64_t),
                       int max_threads, double seconds) {
  PeakResult r{name, unit, isa, {}};
  int64_t iters = 1 << 16;
  for (;;) {  // calibrate (also warms the core's clock up)
    auto t0 = Clock::now();
    g_sink = loop(iters);
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (dt > seconds / 4) {
      iters = int64_t(double(iters) * seconds / dt);
      break;
    }
    iters *= 4;
  }
  for (int t = 1; t <= max_threads; ++t) {
    double dt = time_threads(t, [&](int) { g_sink = loop(iters); });
    r.points.push_back({t, ops_per_iter * double(iters) * t / dt * 1e-9});
  }
  return r;
}

}  // namespace

double PeakResult::at(int threads) const {
  for (auto& p : points)
    if (p.threads == threads) return p.value;
  return 0;
}

size_t l3_cache_bytes() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::string s;
  if (f >> s && !s.empty()) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (v > 0) {
      if (*end == 'K' || *end == 'k')
        v <<= 10;
      else if (*end == 'M' || *end == 'm')
        v <<= 20;
      else if (*end == 'G' || *end == 'g')
        v <<= 30;
      return size_t(v);
    }
  }
  return size_t(32) << 20;
}

PeakResult peak_fp32_fma(int max_threads, double seconds) {
  if (max_kernel_level() >= KernelLevel::AVX512)
    return run_compute("fp32_fma", "GFLOP/s", "vfmadd231ps zmm", kChains * 32.0, loop_fma512, max_threads, seconds);
  if (cpu_features().avx2 && cpu_features().fma)
    return run_compute("fp32_fma", "GFLOP/s", "vfmadd231ps ymm", kChains * 16.0, loop_fma256, max_threads, seconds);
  return {"fp32_fma", "GFLOP/s", "", {}};
}

PeakResult peak_bf16_dot(int max_threads, double seconds) {
  if (max_kernel_level() >= KernelLevel::AVX512 && cpu_features().avx512_bf16)
    return run_compute("bf16_dot", "GFLOP/s", "vdpbf16ps zmm", kChains * 64.0, loop_bf16, max_threads, seconds);
  return {"bf16_dot", "GFLOP/s", "", {}};
}

PeakResult peak_int8_vnni(int max_threads, double seconds) {
  if (max_kernel_level() >= KernelLevel::AVX512 && cpu_features().avx512_vnni)
    return run_compute("int8_vnni", "GOP/s", "vpdpbusd zmm", kChains * 128.0, loop_vnni512, max_threads, seconds);
  if (cpu_features().avx_vnni)
    return run_compute("int8_vnni", "GOP/s", "vpdpbusd ymm", kChains * 64.0, loop_vnni256, max_threads, seconds);
  return {"int8_vnni", "GOP/s", "", {}};
}

PeakResult peak_amx_bf16(int max_threads, double seconds) {
  if (max_kernel_level() >= KernelLevel::AMX)
    return run_compute("amx_bf16", "GFLOP/s", "tdpbf16ps", kernels::kAmxBf16OpsPerIter, kernels::amx_peak_bf16,
                       max_threads, seconds);
  return {"amx_bf16", "GFLOP/s", "", {}};
}

PeakResult peak_amx_int8(int max_threads, double seconds) {
  if (max_kernel_level() >= KernelLevel::AMX)
    return run_compute("amx_int8", "GOP/s", "tdpbusd", kernels::kAmxInt8OpsPerIter, kernels::amx_peak_int8, max_threads,
                       seconds);
  return {"amx_int8", "GOP/s", "", {}};
}

PeakResult peak_mem_read(int max_threads, double seconds) {
  const KernelLevel lvl = max_kernel_level();
  PeakResult r{"mem_read",
               "GB/s",
               lvl >= KernelLevel::AVX512 ? "zmm loads"
               : lvl == KernelLevel::AVX2 ? "ymm loads"
                                          : "scalar loads",
               {}};
  // ≥ 4× L3, split in per-thread slices of whole 512-byte blocks.
  const size_t bytes = std::max<size_t>(4 * l3_cache_bytes(), size_t(128) << 20);
  std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(std::aligned_alloc(size_t(2) << 20, bytes)),
                                                  &std::free);
  if (!buf) throw std::bad_alloc();
  char* p = buf.get();
  // Huge pages where the kernel allows them: with 4 KiB pages the page walks, not DRAM, limit
  // a core's read stream.
  madvise(p, bytes, MADV_HUGEPAGE);
#pragma omp parallel for schedule(static) num_threads(max_threads)
  for (int64_t i = 0; i < int64_t(bytes / 4096); ++i) std::memset(p + i * 4096, int(i & 0xff), 4096);
  auto read = [&](const char* q, size_t n) {
    return lvl >= KernelLevel::AVX512 ? read512(q, n) : lvl == KernelLevel::AVX2 ? read256(q, n) : read_scalar(q, n);
  };
  // Several passes per measurement so that one lasts about seconds / kRepeats.
  auto t0 = Clock::now();
  g_sink64 = read(p, bytes);
  const double one = std::chrono::duration<double>(Clock::now() - t0).count();
  const int passes = std::max(1, int(seconds / kRepeats / std::max(one, 1e-4)));
  for (int t = 1; t <= max_threads; ++t) {
    const size_t slice = bytes / size_t(t) / 512 * 512;
    double dt = time_threads(
        t,
        [&](int id) {
          for (int k = 0; k < passes; ++k) g_sink64 = read(p + size_t(id) * slice, slice);
        },
        /*median=*/true);
    r.points.push_back({t, double(slice) * t * passes / dt * 1e-9});
  }
  return r;
}

}  // namespace qt::bench
