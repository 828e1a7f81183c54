// The dense GEMM kernels behind make_dense_linear: y[M,N] = x[M,K] · W[N,K]ᵀ (+ bias).
//
// Layout (BLIS-style, the roles of the operands chosen for Linear):
//  * W is packed once into panels of NR output features; inside a panel the values are k-major,
//    NR contiguous per k (bf16: per k-pair, NR × 2 interleaved values, the operand order of
//    VDPBF16PS). The microkernel loads these as vectors.
//  * x stays row-major (bf16: converted per call into a row-major bf16 copy, K padded to even);
//    the microkernel broadcasts one value (bf16: one k-pair) of each of its MR rows.
//  * The MR×NR tile of y lives in registers over a KC slice of K; the driver loops slices so a
//    KC×NR slice of the panel stays in L1 while the tile walks down the rows.
// A Family is one such kernel with its packing; libquant/linear/dense_linear.cpp drives any family.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qt::kernels {

// Scalar references: the spec the SIMD kernels are tested against. fp32 accumulation in k order.
void gemm_ref_f32(const float* x, const float* w, const float* bias, int64_t M, int64_t N, int64_t K, float* y);
// w_bf16: [N,K] bf16 bits (rounded with round_bf16); x is rounded with round_bf16 per element.
void gemm_ref_bf16(const float* x, const uint16_t* w_bf16, const float* bias, int64_t M, int64_t N, int64_t K,
                   float* y);

struct Family {
  const char* name;  // "f32-avx512", ...
  int mr, nr;        // register tile: rows of x, output features
  int kgroup;        // k values per packed group (2 for bf16 pairs, else 1); KC is a multiple
  int kc;            // K slice per pass (multiple of kgroup)
  int b_bytes;       // bytes of one packed W element
  int a_bytes;       // bytes of one element of the (converted) activations the tile reads
  bool convert_a;    // false: the tile reads x itself (fp32, lda = K)

  // Bytes of one packed panel for K (K padded to kgroup).
  int64_t k_padded(int64_t K) const { return (K + kgroup - 1) / kgroup * kgroup; }
  size_t panel_bytes(int64_t K) const { return size_t(nr) * size_t(k_padded(K)) * size_t(b_bytes); }

  // Pack output features [n0, n0+cols) of w [N,K] (cols ≤ nr) into one panel; zero padded.
  void (*pack_panel)(const float* w, int64_t K, int64_t n0, int cols, void* dst);
  // Convert rows of x [rows, K] into the row-major form the tile reads (lda = k_padded(K)).
  void (*convert_rows)(const float* x, int64_t rows, int64_t K, void* dst);
  // One tile: rows × cols (rows ≤ mr, cols ≤ nr) of y over k ∈ [k0, k0+kc).
  // a points at row 0, k0 of the activations (lda elements per row); b at the panel's k0 group;
  // c at y's tile (ldc). first: store acc (+ bias[0..cols) when bias); else c += acc.
  void (*tile)(int rows, int cols, int64_t kc, const void* a, int64_t lda, const void* b, float* c, int64_t ldc,
               bool first, const float* bias);
  // One row of x (a: as the tile reads it, kp values) over panels [p0, p1) of a matrix of n
  // features into y, bias at feature p0·nr: the tile's sums at one row, streamed for the decode
  // step (panel_gemv.h). Null: the tile runs.
  void (*gemv)(const void* a, const void* panels, size_t panel_bytes, int64_t p0, int64_t p1, int64_t n, int64_t kp,
               int64_t kc, const float* bias, float* y) = nullptr;
};

// Families this build has; nullptr where the CPU/level cannot run them.
const Family* family_f32_avx512();
const Family* family_f32_avx2();
const Family* family_bf16_avx512();  // native VDPBF16PS
const Family* family_bf16_amx();     // AMX TDPBF16PS (gemm_amx_bf16.cpp)
const Family* family_bf16_avx2();    // bf16 operands, fp32 FMAs (CPUs without AVX512-BF16)

}  // namespace qt::kernels
