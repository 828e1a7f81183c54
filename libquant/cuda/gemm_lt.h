// Dense projections through cuBLASLt: Y [n, out] = X [n, in] · W [out, in]ᵀ with bf16 operands,
// fp32 accumulate, Y in fp32 or bf16; `accumulate` adds into an fp32 Y (the residual add as the
// GEMM's epilogue, beta = 1). Row-major on our side is column-major Wᵀ·X on cuBLAS's: A = W
// (k × m, transposed), B = X (k × n), D = Y (m × n). Plans (descriptors and the heuristic's
// algorithm) are cached per shape. The W8A8 variant multiplies int8 codes into int32 sums
// (CUBLAS_COMPUTE_32I, the "TN" layout int8 tensor cores need); the FP8 variant E4M3 codes into
// fp32 sums (Hopper's FP8 tensor cores, also TN only, out and in multiples of 16). Both leave the scales
// to our epilogues (int8_ops.h), which fuse them into RoPE, the residual add and the next
// quantization in the CPU's rounding order; cuBLASLt's per-tensor A/B scales stay 1.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <map>
#include <tuple>

#include "libquant/cuda/buffer.h"

namespace qt::cuda {

class GemmLt {
 public:
  GemmLt();
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;
  void run(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, cudaDataType_t y_type,
           bool accumulate, cudaStream_t s);
  // As run (fp32 Y, no accumulate) for a row count that changes from call to call (an expert's
  // rows in the MoE FFN): the algorithm is the heuristic's for n rounded up to a multiple of 256,
  // one plan per rounded size, run at n itself (the layouts' column count set per call). A plan per
  // exact n would ask the heuristic (about a millisecond) for nearly every expert of every batch.
  void run_rows(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, float* Y, cudaStream_t s);
  // run_rows for the 8-bit GEMMs below: int8 codes into int32 Y, or (fp8) E4M3 codes into fp32 Y.
  void run_rows8(const void* W, int out, int in, const void* X, int n, void* Y, bool fp8, cudaStream_t s);
  // W8A8: int8 W and X, exact int32 Y [n, out] (int8 tensor cores; in a multiple of 4).
  void run_i8(const int8_t* W, int out, int in, const int8_t* X, int n, int32_t* Y, cudaStream_t s);
  // FP8: E4M3 W and X (bytes), fp32 Y [n, out] = the unscaled sums (out and in multiples of 16).
  void run_f8(const void* W, int out, int in, const void* X, int n, float* Y, cudaStream_t s);
  // Times up to `candidates` of the heuristic's algorithms for this shape on these operands (Y is
  // overwritten, beta = 0) and keeps the fastest for later runs of the shape: the heuristic's first
  // choice is not always the fastest (up to 15% slower at the 8B gate|up shape). Returns the chosen
  // candidate's index (0: the heuristic's own) and writes both times (ms per GEMM) to first_ms /
  // best_ms.
  int tune(const void* W, int out, int in, const void* X, int n, void* Y, cudaDataType_t y_type, cudaDataType_t ab_type,
           cudaStream_t s, int candidates, float* first_ms, float* best_ms);
  // FP8_BLOCK: E4M3 W [out, in] with one fp32 scale per 128×128 block, E4M3 X
  // [n, in] with one fp32 scale per token per 128 columns; Y [n, out] (rows ldy apart) = the
  // scaled sums in fp32, or += them (accumulate). The scales as cuBLASLt's block modes want them
  // (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F for W, _VEC128_32F for X; cuBLAS docs, "128-element
  // 1D and 128x128 2D Block Scaling For FP8 Data Types"): w_scales [ceil(out/128), L4] K-major (L4
  // = in/128 rounded up to 4, padding unread), x_scales [in/128, n] token-major. Hopper, cuBLAS
  // 12.9+; out a multiple of 16, in of 128, n of 4. False (nothing written) where cuBLASLt has no
  // algorithm for the shape; the plan remembers the refusal.
  bool run_block_f8(const void* W, int out, int in, const float* w_scales, const void* X, int n, const float* x_scales,
                    float* Y, int ldy, bool accumulate, cudaStream_t s);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int, int, int, int, int, bool>;  // out, in, n, y_type, ab_type, align, rows
  // align: the operands' common address alignment in bytes (256: cuBLASLt's default assumption;
  // less where a caller passes rows inside a buffer, the experts' slices of the MoE FFN).
  // rows: a run_rows plan (its layouts' column count changes per call; kept apart from run's).
  Plan& plan(int out, int in, int n, cudaDataType_t y_type, cudaDataType_t ab_type, int align = 256, bool rows = false);
  // The heuristic's preference: our workspace, and the operands' alignment where below 256 bytes
  // (the heuristic otherwise assumes 256-byte aligned operands). The caller destroys it.
  cublasLtMatmulPreference_t preference(int align) const;
  static void destroy(Plan& p);  // its descriptor and layouts (those created)
  struct BlockPlan {
    Plan p;
    bool ok = false;
  };
  using BlockKey = std::tuple<int, int, int, int, int, bool>;  // out, in, n, ldy, align, accumulate
  std::map<BlockKey, BlockPlan> block_plans_;
  cublasLtHandle_t h_ = nullptr;
  DeviceBuffer ws_;
  std::map<Key, Plan> plans_;
};

}  // namespace qt::cuda
