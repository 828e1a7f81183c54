// The AMX peak loops of `bench --peak` (libquant/bench/peak.cpp), compiled with the AMX flags
// (gemm_amx_peak.cpp). Run only at kernel level AMX.
#pragma once
#include <cstdint>

namespace qt::kernels {

// Operations per iteration: 4 tile products of 16 × 16 outputs, each 32 bf16 products (TDPBF16PS)
// or 64 int8 products (TDPBUSD), 2 OP per product.
constexpr double kAmxBf16OpsPerIter = 4.0 * 16 * 16 * 32 * 2;
constexpr double kAmxInt8OpsPerIter = 4.0 * 16 * 16 * 64 * 2;

// `iters` iterations of 4 independent tile products on register tiles; the result depends on them.
float amx_peak_bf16(int64_t iters);
float amx_peak_int8(int64_t iters);

}  // namespace qt::kernels
