// The AMX peak loops (amx_peak.h): 4 accumulator tiles (0..3) fed from 2 A and 2 B tiles (4..7) that
// stay in registers, so the tile unit, not loads, sets the rate.
#include <cstring>

#include "libquant/kernels/amx_peak.h"
#include "libquant/kernels/amx_tile.h"

namespace qt::kernels {
namespace {

// Both operand tiles filled from a buffer of small values, so the sums stay finite.
void load_operands(const void* src) {
  _tile_loadd(4, src, 64);
  _tile_loadd(5, src, 64);
  _tile_loadd(6, src, 64);
  _tile_loadd(7, src, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

float sum_of(float (*first)(const void*)) {
  alignas(64) float out[16 * 16];
  _tile_stored(0, out, 64);
  return first(out);
}

}  // namespace

float amx_peak_bf16(int64_t iters) {
  amx_configure_thread();
  alignas(64) uint16_t ops[16 * 32];
  for (auto& v : ops) v = 0x3a83;  // bf16 ≈ 1e-3
  load_operands(ops);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  return sum_of([](const void* p) { return static_cast<const float*>(p)[0]; });
}

float amx_peak_int8(int64_t iters) {
  amx_configure_thread();
  alignas(64) uint8_t ops[16 * 64];
  std::memset(ops, 1, sizeof(ops));
  load_operands(ops);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
  }
  return sum_of([](const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return float(v);
  });
}

}  // namespace qt::kernels
