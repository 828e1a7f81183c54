// This machine's limits, measured: the denominators of every "% of peak" the benches print.
// Each compute peak runs enough independent accumulator chains to saturate the vector units
// (latency × throughput), so the figure is what the hardware sustains, not what a naive loop
// reaches.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qt::bench {

struct PeakPoint {
  int threads = 0;
  double value = 0;  // GFLOP/s, GOP/s or GB/s (best of the repetitions)
};

struct PeakResult {
  std::string name;               // "fp32_fma", "bf16_dot", "int8_vnni", "amx_bf16", "amx_int8", "mem_read"
  std::string unit;               // "GFLOP/s", "GOP/s", "GB/s"
  std::string isa;                // instruction measured, or "" when the CPU lacks it
  std::vector<PeakPoint> points;  // one per thread count 1..N; empty when unsupported
  double at(int threads) const;   // value at that thread count (0 when not measured)
};

// FP32 FMA (vfmadd231ps zmm, or ymm without AVX-512): 2 FLOP per lane.
PeakResult peak_fp32_fma(int max_threads, double seconds = 0.15);
// BF16 dot product (vdpbf16ps zmm): 2 FLOP per bf16 pair element (64 per instruction).
PeakResult peak_bf16_dot(int max_threads, double seconds = 0.15);
// INT8 VNNI (vpdpbusd zmm, or the AVX-VNNI ymm form): 2 OP per u8×s8 product (128 per zmm).
PeakResult peak_int8_vnni(int max_threads, double seconds = 0.15);
// AMX tile products (tdpbf16ps / tdpbusd on 4 register tiles) where the kernel level is AMX.
PeakResult peak_amx_bf16(int max_threads, double seconds = 0.15);
PeakResult peak_amx_int8(int max_threads, double seconds = 0.15);
// Memory read bandwidth over a working set of at least 4× the L3 cache.
PeakResult peak_mem_read(int max_threads, double seconds = 0.3);

// L3 size in bytes from sysfs (cpu0 index3), 32 MiB when it cannot be read.
size_t l3_cache_bytes();

}  // namespace qt::bench
