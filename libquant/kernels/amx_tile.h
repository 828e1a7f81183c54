// What the AMX kernels (gemm_amx_*.cpp, compiled with -mamx-tile -mamx-int8 -mamx-bf16) share:
// the one tile palette they all use, loaded once per thread.
//
// Palette 1, tiles 0..7 each 16 rows × 64 bytes: a C tile is 16 × 16 fp32 or int32 sums, an A tile
// 16 token rows × 64 bytes of k (32 bf16 or 64 int8), a B tile 16 k-groups × 16 output features
// with a group's 2 bf16 / 4 int8 in one dword (Intel SDM vol. 2, TDPBF16PS / TDPBUSD). Every
// kernel takes C in tiles 0..3, A in 4..5 and B in 6..7.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace qt::kernels {

struct alignas(64) AmxTileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// LDTILECFG with the whole 64-byte configuration as its memory operand. GCC 12's _tile_loadconfig
// (amxtileintrin.h) names only its first 8 bytes, which lets the compiler delete the stores of the
// rows and widths as dead: every tile then stays 0 x 0 and the first tile instruction raises #UD
// (what happens to ggml-cpu/amx/mmq.cpp's ggml_tile_config_init built with GCC 12).
inline void amx_load_config(const AmxTileConfig& cfg) { __asm__ volatile("ldtilecfg %0" : : "m"(cfg)); }

// The configuration is per thread (XSAVE state): each thread that runs a tile kernel loads it
// once; nothing in this program changes or releases it afterwards.
inline void amx_configure_thread() {
  thread_local bool configured = false;
  if (configured) return;
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  amx_load_config(cfg);
  configured = true;
}

}  // namespace qt::kernels
