// Weights of the Dequantized scheme rows (schemes/scheme.h: nvfp4, mxfp4 and their _a4 rows,
// fp8_block) on the GPU: the stored codes and scales, decoded to bf16 right before each GEMM as
// affine.h's weights are (Hopper has no FP4 tensor cores; NVFP4 / MXFP4 values are exact in bf16),
// and the rounding of a Linear's input for the rows with quantized activations.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "libquant/cuda/buffer.h"

namespace qt {
struct PackedTensor;
struct Scheme;
}  // namespace qt

namespace qt::cuda {

enum class BlockFpKind { Nvfp4, Mxfp4, Fp8Block };

struct BlockFpWeight {
  BlockFpKind kind = BlockFpKind::Nvfp4;
  // nvfp4 / mxfp4: E2M1 codes [rows, cols/2], column 2i in the low nibble; fp8_block: E4M3 [rows, cols].
  DeviceBuffer codes;
  // nvfp4: E4M3 bytes [rows, cols/16]; mxfp4: E8M0 bytes [rows, cols/32]; fp8_block: fp32
  // [rows, cols/128], each 128×128 block's scale repeated on its rows (so that stacked
  // projections of any height index alike).
  DeviceBuffer scales;
  DeviceBuffer global;  // nvfp4: fp32 [rows], the global scale of the projection each row is from
  // fp8_block on the FP8 tensor cores (GemmLt::run_block_f8): the stacked rows cut into segments
  // of whole 128×128 blocks (a new one after a part whose height leaves its last block partial),
  // each with its block scales as cuBLASLt reads them, [ceil(rows/128), L4] (L4: cols/128 rounded
  // up to 4, zero-padded). The decode above still runs where a GEMM cannot.
  struct Segment {
    int row0 = 0, rows = 0;
    DeviceBuffer scales;
  };
  std::vector<Segment> segments;
  int rows = 0, cols = 0;
  bool empty() const { return rows == 0; }
  size_t bytes() const { return codes.bytes() + scales.bytes() + global.bytes(); }
};

// out [rows, cols] bf16 = the weight as the CPU's DequantizedLinear multiplies it, rounded to bf16:
// nvfp4 / mxfp4 dequantize_weights' values (bf16 already: bit for bit), fp8_block's kernel_values
// (e4m3 · s in fp32) rounded to bf16.
void blockfp_dequant(const BlockFpWeight& w, __nv_bfloat16* out, cudaStream_t s);

// The activation rounding of a Dequantized row (schemes/scheme.h round_activations): 0 none,
// or the row's function's formulas per token.
enum class ActRound { None, Nvfp4, Mxfp4, Fp8Groups };
int act_round_group(ActRound a);  // the group the width must be a multiple of (16, 32, 128; 0 None)

// y [rows, k] = round_activations_*(x) per row, bit for bit the CPU function's fp32 values (as
// bf16 where y is bf16: the GEMM's operand). k a multiple of act_round_group(a).
void round_activations(ActRound a, const float* x, float* y, int rows, int k, cudaStream_t s);
// nvfp4 with `global` non-null: the factored form the forward multiplies, y = bf16(q · e) (the
// E2M1 value times its group's E4M3 scale: at most 6 significant bits, exact in bf16) and
// global[row] = the token's global scale gs; the GEMM's output row divided by gs (divide_rows) is
// then the product of the CPU's values q · fp32(e/gs) up to fp32 rounding, as an NVFP4 GEMM
// applies the global scale in its epilogue. Rounding q·(e/gs) to bf16 instead costs a relative
// 2^-9 per value, which the next rounding steps amplify (on the tiny llama the CPU's own bf16
// path lands half as far from its fp32 one as skipping the rounding does).
void round_activations(ActRound a, const float* x, __nv_bfloat16* y, int rows, int k, cudaStream_t s,
                       float* global = nullptr);
// fp8_block's activations for the FP8 tensor cores: x [rows, k] fp32 (k a multiple of 128) into
// E4M3 codes q [rows, k] and per token per 128 columns the scale s [k/128, rows] (token-major, as
// GemmLt::run_block_f8 reads them): the CPU's quantize_token_fp8 of each group (codes · scale =
// round_activations_fp8_groups' values bit for bit).
void quantize_fp8_groups(const float* x, uint8_t* q, float* s, int rows, int k, cudaStream_t st);
// x[i] += y[i], i < n.
void add_into(float* x, const float* y, size_t n, cudaStream_t s);
// y [rows, cols]: each row divided by d[row] in place, or (add_to non-null) added so to add_to.
void divide_rows(float* y, const float* d, int rows, int cols, float* add_to, cudaStream_t s);

// blockfp_load.cpp: the packed weights of one stacked matrix (q|k|v, gate|up, or one projection;
// the same Dequantized scheme, the same width) uploaded as stored; UserError naming `path` for
// another scheme or a shape the row cannot hold.
BlockFpWeight upload_blockfp(const std::vector<const PackedTensor*>& parts, const std::string& path);
// The activation rounding of a Dequantized row (its round_activations function).
ActRound act_round_of(const Scheme& row);

}  // namespace qt::cuda
