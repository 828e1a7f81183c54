// Linear: y = x · Wᵀ (+ b) over a batch of tokens. The model's blocks only see this interface,
// so packed / quantized weights plug in without touching the block code.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "formats/tensor.h"

namespace qt {

enum class Compute { F32, BF16 };

// Output rows [r0, r1) of a Linear.
struct RowSlice {
  int64_t r0 = 0, r1 = 0;
};

// Slice `part` of `parts` over n rows, cut at multiples of 16 (the last ends at n): the decode
// step's SwiGLU runs on each thread's own gate/up rows and takes the whole row's path from a
// multiple of 16, so Linears whose kernels work a row at a time slice this way.
inline RowSlice row_block_slice(int64_t n, int part, int parts) {
  const int64_t blocks = (n + 15) / 16;
  return {std::min(n, blocks * part / parts * 16), std::min(n, blocks * (part + 1) / parts * 16)};
}

class Linear {
 public:
  virtual ~Linear() = default;
  // x: [n_tokens, in_features] row-major; y: [n_tokens, out_features] row-major (overwritten).
  virtual void forward(const float* x, int64_t n_tokens, float* y) const = 0;
  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;
  virtual size_t weight_bytes() const = 0;  // bytes of the packed weights a forward reads
  virtual std::string kind() const = 0;     // "f32", "bf16", ...
  // Row r of the weight as fp32 (in_features values), as the forward uses it: the lookup of a
  // quantized embedding table that doubles as the output head. Packed weight-only Linears
  // implement it; the default throws std::logic_error.
  virtual void dequantize_row(int64_t r, float* out) const;
  // True when the forward reads the weight tensors it was made from in place (the weight-only
  // Linears compute from the stored codes); false when it made its own copy (dense panels, the
  // integer kernels' repacked codes), so a loader may release the source (release_pages).
  virtual bool borrows_weights() const { return false; }

  // One token, one slice of the output rows: the M = 1 step of a decode team (llama_decode.cpp),
  // where every thread of an OpenMP team the caller already holds computes its own slice — no
  // Linear forks threads of its own, and there is no fork per Linear. The rows are cut into
  // `parts` slices the kernel can compute alone (dense: whole panels); slice `part` is written
  // into y (the whole output vector; other rows untouched, bias included) and returned. The same
  // shape and `parts` always give the same slices. Single-threaded; the same bits as forward().
  // Linears without such a kernel return false from has_gemv_slices (gemv_slice then throws).
  virtual bool has_gemv_slices() const { return false; }
  virtual RowSlice gemv_slice(const float* x, int part, int parts, float* y) const;

  // ys[i] = ls[i]·x for the count Linears ls (this one among them, first) in one call, when this
  // Linear's kind can share work between them (one converted or quantized copy of x, one fork of
  // threads); false, having done nothing, when it cannot. Each ys[i] gets its forward()'s bits.
  virtual bool forward_shared(const Linear* const* ls, int count, const float* x, int64_t n, float* const* ys) const {
    (void)ls, (void)count, (void)x, (void)n, (void)ys;
    return false;
  }
};

// Dense weights w: [out, in] row-major fp32 (HF layout), packed for the fastest kernel of the
// current kernel level. `bias` may be null. Compute::BF16 needs AVX512-BF16 (falls back to F32
// with a message otherwise).
std::unique_ptr<Linear> make_dense_linear(const float* w, int64_t out, int64_t in, const float* bias, Compute compute);
// The same from a [out, in] tensor of any float dtype (F32/F16/BF16/F64), converted to fp32 one
// panel of rows at a time while packing (no whole-matrix fp32 copy). Equal to the above on to_f32(w).
std::unique_ptr<Linear> make_dense_linear(const Tensor& w, const float* bias, Compute compute);

// ys[i] = x · W_iᵀ for count Linears that read the same x (q/k/v, gate/up): through
// ls[0]->forward_shared where their kind shares the work (dense Linears of one kernel family,
// int8 VNNI or AMX Linears), else one forward() after another. Each ys[i] gets its forward()'s bits.
void forward_shared_input(const Linear* const* ls, int count, const float* x, int64_t n, float* const* ys);

// make_dense_linear's driver (dense_linear.cpp) over the kernel families of libquant/kernels/gemm.h.
namespace kernels {
struct Family;
// Name of the family make_dense_linear picks now for `compute` ("f32-avx512", "bf16-avx2",
// "f32-ref", ...).
const char* dense_kernel_name(Compute compute);
// The family itself (nullptr: the scalar reference), for Linears that feed it decoded rows
// (decoded_rows.h) and so compute as a dense Linear over the same values would.
const Family* dense_family(Compute compute);
// Overrides of the driver's blocking for tuning experiments (0 = the driver's choice).
struct Tuning {
  int64_t kc = 0;      // K slice
  int64_t mc = 0;      // rows per row chunk
  int64_t chunks = 0;  // work chunks per thread (1 = a static split)
};
Tuning& tuning();
}  // namespace kernels

}  // namespace qt
