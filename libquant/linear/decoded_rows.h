// The drivers of a Linear whose weight is known one decoded row at a time (a weight-only packed
// weight, GGUF blocks): row r as fp32 from `decode`, never the whole matrix at once.
//  * decoded_panel_gemm: a batch — per panel of NR rows, decode, pack as the dense family packs
//    (kernels/gemm.h), run its tiles over every token row. The decode is amortised over the batch;
//    the tiles and K slices are the dense driver's, so y has the bits of make_dense_linear over the
//    decoded matrix.
//  * decoded_row_dots: a few tokens — one decoded row at a time against every token (fp32 dot
//    products, 16/8 lanes), no panel packing, which would cost more than the few dot products.
#pragma once
#include <cstdint>
#include <functional>

#include "libquant/cpu_features.h"
#include "libquant/kernels/gemm.h"

namespace qt {

// decode(r, out): row r of the weight, k fp32 values. Called from several threads at once.
using RowDecoder = std::function<void(int64_t r, float* out)>;

// y[m, n] = x[m, k] · Wᵀ (+ bias[n]) through family f's tiles.
void decoded_panel_gemm(const kernels::Family& f, int64_t n, int64_t k, const RowDecoder& decode, const float* x,
                        int64_t m, const float* bias, float* y);

// The same for output rows [r0, r1) (y still [m, n]) by dot products at `level`: single-threaded
// when `threads` is false (a decode team's slice), else the rows shared by the OpenMP threads.
void decoded_row_dots(int64_t n, int64_t k, const RowDecoder& decode, const float* x, int64_t m, const float* bias,
                      float* y, int64_t r0, int64_t r1, bool threads, KernelLevel level);

// Σ a[i]·b[i] in fp32: two accumulators over steps of 32 (AVX-512) or 16 (AVX2), then the tail
// in order; the scalar loop below AVX2.
float dot_f32(const float* a, const float* b, int64_t k, KernelLevel level);

}  // namespace qt
