// The W8A8 gate|up GEMM with SwiGLU in its epilogue, so the int32 sums of the FFN's widest
// projection never reach global memory: X [n, in] int8 codes (per-token scales sx) times W [2F, in]
// int8 codes (per-channel scales sw) through a CUTLASS Hopper (sm_90a) kernel — TMA loads,
// ping-pong warp groups on wgmma, the epilogue as a visitor tree (CUTLASS 3 "EVT"; the
// construction of vLLM's cutlass_scaled_mm). cuBLASLt's int8 GEMMs write only int32 or int8, so
// with them the gate|up sums (2F int32 a token) are written and read back by the SwiGLU pass;
// here h = silu(g)·u (F fp32 a token) is what leaves the GEMM.
//
// For int8 codes h is the unfused path's bit for bit (q8_math.cuh's deq and silu_mul on the same
// exact int32 sums), so quant_rows(h) gives swiglu_q8's codes. FP8 (E4M3 codes) runs the same
// kernels with the FP8 tensor cores' own accumulation (cutlass_q8.cuh), as cuBLASLt's FP8 GEMMs do
// here (gemm_lt.cpp): CUTLASS's FP8 kernels with cuBLASLt's default promotion of partial sums to
// fp32 ran 4-20% slower than cuBLASLt's GEMM plus the pass (results/cuda.md). Not fused (measured,
// results/cuda.md "GEMMs with fused epilogues"): the o / down GEMMs' residual add (the epilogue's
// extra read and write of x is not hidden in a 256-row cooperative kernel and a 128-row ping-pong
// one is slower; cuBLASLt's GEMM plus the fused residual-norm pass was faster).
//
// Available where built with CUTLASS (scripts/build_cuda.sh fetches its headers; QT_HAVE_CUTLASS)
// and the device is compute capability 9.0; elsewhere the callers keep the cuBLASLt path.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qt::cuda {

// Built with the CUTLASS kernel and running on an sm_90 device (the current one).
bool q8_fused_available();
// The shapes the kernel takes: in a multiple of 16 (TMA rows of 16 bytes), F a multiple of 4.
bool q8_fused_fits(int F, int in);

// W [2F, in] holds gate row j at row 2j and up row j at 2j + 1 (interleave_gate_up below; sw
// likewise), so each thread's accumulator holds both halves of its columns; h [n, F] = silu(g)·u
// in fp32 with g, u = sx · (sw · acc) (swiglu_q8's values before its quantization).
void gemm_q8_swiglu(const int8_t* W, int F, int in, const float* sw, const int8_t* X, int n, const float* sx, float* h,
                    cudaStream_t s);
// FP8_DYNAMIC's: E4M3 codes, the sums accumulated as Hopper's FP8 tensor cores do without promotion
// (cutlass_q8.cuh; vLLM's FP8 GEMMs), so within their rounding of cuBLASLt's FP8 GEMM (not promised bit for bit; the same in
// the runs measured).
void gemm_q8_swiglu(const __nv_fp8_e4m3* W, int F, int in, const float* sw, const __nv_fp8_e4m3* X, int n,
                    const float* sx, float* h, cudaStream_t s);

// The q|k|v GEMM with RoPE in its epilogue (gemm_q8_rope.cu): D [n, out] f16 = sx · (sw · acc) of
// X [n, in] · W [out, in]ᵀ with the first `rot` columns (the q and k heads, hd wide) rotated as
// rope_split_q8 rotates them (rotate-half; row t at position t % T; cs [T, hd/2, 2]: rope_split_q8's
// cos and sin tables interleaved, rope_cos_sin): the same bits as that pass, q, k and v side by side
// in each row instead of in three arrays.
// The shapes it takes: in a multiple of 16, out of 8, hd 64 or 128, rot a multiple of hd.
bool q8_rope_fits(int out, int in, int hd, int rot);
void gemm_q8_rope(const int8_t* W, int out, int in, const float* sw, const int8_t* X, int n, const float* sx, int T,
                  int hd, int rot, const float* cs, __half* D, cudaStream_t s);
void gemm_q8_rope(const __nv_fp8_e4m3* W, int out, int in, const float* sw, const __nv_fp8_e4m3* X, int n,
                  const float* sx, int T, int hd, int rot, const float* cs, __half* D, cudaStream_t s);
// The interleaved table gemm_q8_rope reads: (cos[i], sin[i]) for each of `count` angles.
std::vector<float> rope_cos_sin(const float* cos, const float* sin, size_t count);

// Rows [gate (F); up (F)] of `rows` (F·2 rows of `row_bytes`) into the interleaved order above (undo:
// back), in place through a scratch copy; used for the codes (row_bytes = in) and the scales (4).
void interleave_gate_up(void* rows, int F, size_t row_bytes, cudaStream_t s, bool undo = false);

}  // namespace qt::cuda
