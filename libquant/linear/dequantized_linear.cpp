// The FP4 Linears (nvfp4, mxfp4 and their _a4 rows) and fp8_block: the weights decoded once to
// exactly dequantize_weights' values (or the row's kernel_values) and run through the dense GEMM
// (make_dense_linear) — the CPU
// emulation of what an FP4 tensor core computes from the same codes, up to summation order.
// Rows with quantized activations round each Linear input first (the row's round_activations,
// as compressed-tensors' fake quantization rounds a Linear's input), then multiply.
#include <mutex>
#include <vector>

#include "formats/error.h"
#include "libquant/linear/packed_linear.h"

namespace qt {
namespace {

class DequantizedLinear final : public Linear {
 public:
  DequantizedLinear(PackedTensor w, const float* bias, const PackedLinearOptions& opt)
      : w_(std::move(w)), n_(w_.rows), k_(w_.cols), scheme_(w_.params.scheme) {
    const Scheme& row = find_scheme(w_.params.scheme);
    if (row.kernel_values) check_packed(w_, scheme_);
    const std::vector<float> deq = values();
    if (opt.act != ActMode::None) round_ = row.round_activations;
    if (round_ && k_ % w_.params.group_size != 0)
      user_error("{}: activation groups of {} do not divide the input width {}", scheme_, w_.params.group_size, k_);
    dense_ = make_dense_linear(deq.data(), n_, k_, bias, opt.compute);
    // The codes stay (borrowed) for dequantize_row; their pages go until a lookup reads them again.
    for (const Tensor* t : {&w_.data, &w_.scales, &w_.biases}) release_pages(*t);
  }

  void forward(const float* x, int64_t m, float* y) const override {
    if (!round_) return dense_->forward(x, m, y);
    thread_local std::vector<float> xq;
    xq.assign(x, x + m * k_);
    round_(xq.data(), m, k_);
    dense_->forward(xq.data(), m, y);
  }
  // A quantized embedding's lookups (the tied output head): the whole matrix decoded once, on the
  // first lookup — only that Linear pays a second fp32 copy beside its packed panels.
  void dequantize_row(int64_t r, float* out) const override {
    if (r < 0 || r >= n_) user_error("row {} outside a weight of {} rows", r, n_);
    std::call_once(deq_once_, [this] { deq_ = values(); });
    std::copy(deq_.begin() + r * k_, deq_.begin() + (r + 1) * k_, out);
  }
  bool borrows_weights() const override { return true; }
  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  // The dense weights every forward reads, not the FP4 codes they came from.
  size_t weight_bytes() const override { return dense_->weight_bytes(); }
  std::string kind() const override { return scheme_ + "-" + dense_->kind(); }

 private:
  // The weight as the dense panels hold it: the row's kernel_values, else dequantize_weights.
  std::vector<float> values() const {
    const Scheme& row = find_scheme(w_.params.scheme);
    if (!row.kernel_values) return dequantize_weights(w_);
    std::vector<float> v(size_t(n_ * k_));
    row.kernel_values(w_, v.data());
    return v;
  }

  PackedTensor w_;
  int64_t n_, k_;
  std::string scheme_;
  mutable std::once_flag deq_once_;
  mutable std::vector<float> deq_;  // values(), made by the first dequantize_row
  void (*round_)(float*, int64_t, int64_t) = nullptr;
  std::unique_ptr<Linear> dense_;
};

}  // namespace

std::unique_ptr<Linear> make_dequantized_linear(PackedTensor w, const float* bias, const PackedLinearOptions& opt) {
  return std::make_unique<DequantizedLinear>(std::move(w), bias, opt);
}

}  // namespace qt
