// The FP8 packed Linear (the fp8 row, compressed-tensors FP8_DYNAMIC): activations rounded to E4M3
// per token (quantize_activations_fp8: the same values compressed-tensors' fake quantization and
// reference_gemm give), then the dot products of E4M3 values and the scales after them, as FP8
// GEMMs apply them: y = s_x · (s_w · Σ_k a·q).
//
// Both operands are E4M3 values, exact in fp32, and each product is exact in fp32 too (4 × 4
// significant bits), so the dense fp32 GEMM microkernels (AVX-512 / AVX2 / scalar, dense_linear.cpp)
// run it on the weights decoded once at load to their unscaled E4M3 values (`--compute bf16`: the
// AVX512-BF16 kernels, whose operands hold E4M3 values exactly too). Only the fp32
// accumulation order differs from reference_gemm, which sums exactly in double: the two agree to
// fp32 rounding of the sum (tests/test_fp8.cpp), as an FP8 tensor core's fp32 accumulator does.
#include <vector>

#include "formats/error.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/e4m3.h"
#include "libquant/schemes/packed_values.h"

namespace qt {
namespace {

using namespace schemes_detail;

class Fp8Linear final : public Linear {
 public:
  Fp8Linear(PackedTensor w, const float* bias, const PackedLinearOptions& opt)
      : n_(w.rows), k_(w.cols), params_(w.params), act_(opt.act) {
    if (act_ == ActMode::Default) act_ = ActMode::Fp8PerToken;
    if (act_ != ActMode::Fp8PerToken && act_ != ActMode::None)
      user_error("fp8 weights take fp8 (per-token) or unquantized activations");
    s_.resize(size_t(n_));
    for (int64_t r = 0; r < n_; ++r) s_[size_t(r)] = load_float(w.scales, size_t(r));
    float table[256];
    for (int c = 0; c < 256; ++c) table[c] = e4m3_to_f32(uint8_t(c));
    std::vector<float> v(size_t(n_ * k_));
    const uint8_t* q = w.data.data;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_; ++r)
      for (int64_t j = 0; j < k_; ++j) {
        const float e = table[q[r * k_ + j]];
        // None: the dequantized weight (dequantize_weights' values), fp32 activations.
        v[size_t(r * k_ + j)] = act_ == ActMode::None ? fp8_value(q[r * k_ + j], s_[size_t(r)], params_.dtype) : e;
      }
    if (act_ == ActMode::None) {
      dense_ = make_dense_linear(v.data(), n_, k_, bias, opt.compute);
    } else {
      dense_ = make_dense_linear(v.data(), n_, k_, nullptr, opt.compute);
      if (bias) bias_.assign(bias, bias + n_);
    }
    w_ = std::move(w);
  }

  void forward(const float* x, int64_t m, float* y) const override {
    if (m <= 0) return;
    if (act_ == ActMode::None) return dense_->forward(x, m, y);
    thread_local std::vector<float> a, sx;
    a.resize(size_t(m * k_));
    sx.resize(size_t(m));
    quantize_activations_fp8(x, m, k_, a.data(), sx.data());
    dense_->forward(a.data(), m, y);
    const float* s = sx.data();  // this thread's buffer (a thread_local named inside the region is the worker's)
#pragma omp parallel for schedule(static) if (m * n_ > (1 << 16))
    for (int64_t t = 0; t < m; ++t) scale_rows(s[t], 0, n_, y + t * n_);
  }

  // The decode step's slice (linear.h): the token rounded on this thread, then the dense kernel's
  // slice and the scales over the rows it wrote.
  bool has_gemv_slices() const override { return dense_->has_gemv_slices(); }
  RowSlice gemv_slice(const float* x, int part, int parts, float* y) const override {
    if (act_ == ActMode::None) return dense_->gemv_slice(x, part, parts, y);
    thread_local std::vector<float> a;
    a.resize(size_t(k_));
    const float sx = quantize_token_fp8(x, k_, a.data());
    const RowSlice rs = dense_->gemv_slice(a.data(), part, parts, y);
    scale_rows(sx, rs.r0, rs.r1, y);
    return rs;
  }

  void dequantize_row(int64_t r, float* out) const override {
    if (r < 0 || r >= n_) user_error("row {} outside a weight of {} rows", r, n_);
    for (int64_t j = 0; j < k_; ++j) out[j] = fp8_value(w_.data.data[r * k_ + j], s_[size_t(r)], params_.dtype);
  }

  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  size_t weight_bytes() const override { return dense_->weight_bytes() + s_.size() * 4; }
  std::string kind() const override { return act_ == ActMode::None ? "fp8-fp-act" : "fp8"; }

 private:
  // y[n] = s_x · (s_w[n] · y[n]) (+ bias) for n in [r0, r1): reference_gemm's epilogue.
  void scale_rows(float sx, int64_t r0, int64_t r1, float* y) const {
    for (int64_t n = r0; n < r1; ++n) {
      y[n] = sx * (s_[size_t(n)] * y[n]);
      if (!bias_.empty()) y[n] += bias_[size_t(n)];
    }
  }

  int64_t n_, k_;
  SchemeParams params_;
  ActMode act_;
  std::vector<float> s_, bias_;
  std::unique_ptr<Linear> dense_;
  PackedTensor w_;  // the codes, for dequantize_row
};

}  // namespace

std::unique_ptr<Linear> make_fp8_linear(PackedTensor w, const float* bias, const PackedLinearOptions& opt) {
  return std::make_unique<Fp8Linear>(std::move(w), bias, opt);
}

}  // namespace qt
