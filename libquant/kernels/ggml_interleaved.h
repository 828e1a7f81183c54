// GGUF Q4_0 / Q4_1 / Q8_0 / Q4_K / Q6_K rows interleaved 16 at a time, for one token through int8 activations
// (--weight-act int8). A row-at-a-time dot over these blocks spends ~11 instructions on each block
// of 32 (gather the scale, unpack, one half of a VPDPBUSD, a lane permute for the scale, convert,
// FMA) and runs out of issue slots at about half a core's read rate. Interleaved, one 64-byte load
// holds four codes of each of 16 rows and one VPDPBUSD multiplies them by four token values
// broadcast to every lane: the lanes are the rows, so no reduction and no per-row scale shuffle
// (~2 instructions a block). llama.cpp repacks the same types at load for the same reason
// (ggml-cpu/repack.cpp, block_q4_0x8 and ggml_gemv_q4_0_8x8_q8_0; its AMX backend's VNNI kernels
// use 16 rows, ggml-cpu/amx/mmq.cpp).
//
// A group of 16 rows, per block j (the group is `16 × row bytes`, as the rows were, but for Q4_K):
//   16 fp16 d (row i at 2i) | Q4_1: 16 fp16 m | the code words: word t (t < 4 for the 4-bit
//   types, 8 for Q8_0) is 64 bytes, lane i = bytes 4t..4t+3 of row i's block codes.
// A 4-bit word's low nibbles are elements 4t..4t+3 of the block, its high nibbles 16+4t..16+4t+3
// (ggml's order: element e < 16 in the low nibble of byte e); a Q8_0 word holds elements 4t..4t+3.
// Q4_K (super-blocks of 256): 16 fp16 d | 16 fp16 dmin | the 8 sub-blocks' 6-bit scales, then
// minimums, unpacked to a byte each ([sub-block][row], 2 × 128 bytes: 64 more than the 12 bytes a
// row packs them in, +2.8%) | 4 × 8 code words: word (p, t) holds bytes 32p+4t..32p+4t+3 of each
// row's qs, low nibbles sub-block 2p, high 2p+1.
// Q6_K: 16 fp16 d | the 16 int8 sub-block scales, [sub-block][row] | 32 words of ql, 16 of qh (word
// w: bytes 4w..4w+3 of each row's ql or qh) — 16 × 210 bytes, as the rows were.
#pragma once
#include <cstddef>
#include <cstdint>

#include "libquant/kernels/ggml_token_i8.h"

namespace qt::kernels {

struct GgmlInterleaved {
  size_t group_block_bytes;  // a group's bytes per block of the rows (16 × the type's, Q4_K: + 64)
  // 16 rows' blocks (rows[i] its first block; a null row packs as zeros) -> one group at dst.
  void (*pack)(const uint8_t* const rows[16], size_t nblocks, uint8_t* dst);
  // Row i of a group back in the file's block layout (row_bytes at out).
  void (*unpack)(const uint8_t* group, int i, size_t nblocks, uint8_t* out);
  // y[0..16) = the 16 rows · x (Σ over nblocks blocks, x as quantized).
  void (*gemv)(const uint8_t* group, const GgmlTokenI8& x, size_t nblocks, float* y);
};

// The kernels for ggml type id `type` (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) where the CPU has AVX-512 VNNI (with
// BW, VL, DQ, F16C); else nullptr.
const GgmlInterleaved* ggml_interleaved(uint32_t type);

}  // namespace qt::kernels
