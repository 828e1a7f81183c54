// GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 / IQ4_XS / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K rows interleaved 16 at a time, for one token through int8 activations
// (--weight-act int8). A row-at-a-time dot over these blocks spends ~11 instructions on each block
// of 32 (gather the scale, unpack, one half of a VPDPBUSD, a lane permute for the scale, convert,
// FMA) and runs out of issue slots at about half a core's read rate. Interleaved, one 64-byte load
// holds four codes of each of 16 rows and one VPDPBUSD multiplies them by four token values
// broadcast to every lane: the lanes are the rows, so no reduction and no per-row scale shuffle
// (~2 instructions a block). llama.cpp repacks the same types at load for the same reason
// (ggml-cpu/repack.cpp, block_q4_0x8 and ggml_gemv_q4_0_8x8_q8_0; its AMX backend's VNNI kernels
// use 16 rows, ggml-cpu/amx/mmq.cpp).
//
// A group of 16 rows holds, per block j, each field of the 16 rows' blocks side by side (layouts in
// ggml_interleaved.cpp): the legacy types their fp16 d (and m) vectors, then code words — word t is
// 64 bytes, lane i = bytes 4t..4t+3 of row i's block codes (a 4-bit word's low nibbles are elements
// 4t..4t+3, its high nibbles 16+4t..16+4t+3; a Q8_0 word elements 4t..4t+3). Q4_K and Q5_K unpack their 6-bit
// scales and minimums to a byte each (+64 bytes a group block: +2.8%, +2.3%), Q3_K its 6-bit scales
// (+64: +3.6%), IQ4_XS its sub-block scales (+32: +1.5%); the others are the rows' size.
#pragma once
#include <cstddef>
#include <cstdint>

#include "libquant/kernels/ggml_token_i8.h"

namespace qt::kernels {

struct GgmlInterleaved {
  size_t group_block_bytes;  // a group's bytes per block of the rows (16 × the type's; + 64 for Q3_K–Q5_K, + 32 IQ4_XS)
  // 16 rows' blocks (rows[i] its first block; a null row packs as zeros) -> one group at dst.
  void (*pack)(const uint8_t* const rows[16], size_t nblocks, uint8_t* dst);
  // Row i of a group back in the file's block layout (row_bytes at out).
  void (*unpack)(const uint8_t* group, int i, size_t nblocks, uint8_t* out);
  // y[16n + i] = row i of group n · x (Σ over nblocks blocks, x as quantized) for the `count`
  // groups (1..4) at groups + n·stride.
  void (*gemv)(const uint8_t* groups, size_t stride, int count, const GgmlTokenI8& x, size_t nblocks, float* y);
};

// The kernels for ggml type id `type` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) where the CPU has AVX-512 VNNI (with
// BW, VL, DQ, F16C); else nullptr.
const GgmlInterleaved* ggml_interleaved(uint32_t type);

}  // namespace qt::kernels
