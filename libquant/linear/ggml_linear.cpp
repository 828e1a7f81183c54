// make_ggml_linear (ggml_linear.h).
#include "libquant/linear/ggml_linear.h"

#include <cctype>

#include "formats/error.h"
#include "formats/ggml_blocks.h"
#include "libquant/cpu_features.h"
#include "libquant/kernels/ggml_decode.h"
#include "libquant/kernels/ggml_dot_i8.h"
#include "libquant/linear/decoded_rows.h"

namespace qt {
namespace {

class GgmlLinear final : public Linear {
 public:
  GgmlLinear(GgmlWeight w, const float* bias, Compute compute, bool int8_tokens)
      : w_(std::move(w)), row_(ggml_type_row(w_.type)), compute_(compute), fam_(kernels::dense_family(compute)) {
    if (!row_ || !row_->to_float || w_.cols % row_->block_size != 0 ||
        w_.row_bytes != size_t(w_.cols / row_->block_size) * size_t(row_->type_size) ||
        w_.nbytes != w_.row_bytes * size_t(w_.rows) || (!w_.row_of.empty() && int64_t(w_.row_of.size()) != w_.rows))
      user_error("ggml weight of type {} and shape [{}, {}]: not whole blocks of a type with a dequantizer",
                 row_ ? row_->name : std::to_string(w_.type), w_.rows, w_.cols);
    if (bias) bias_.assign(bias, bias + w_.rows);
    blocks_ = size_t(w_.cols / row_->block_size);
    simd_ = kernels::ggml_decoder_avx512(w_.type);
    simd_dot_ = kernels::ggml_dot_avx512(w_.type);
    if (int8_tokens) dot_i8_ = kernels::ggml_dot_i8(w_.type);
  }

  void forward(const float* x, int64_t m, float* y) const override {
    if (m <= 0) return;
    const float* bias = bias_.empty() ? nullptr : bias_.data();
    const RowDecoder decode = [this](int64_t r, float* out) { decode_row(r, out); };
    if (fam_ && m >= 4) return decoded_panel_gemm(*fam_, w_.rows, w_.cols, decode, x, m, bias, y);
    rows(x, m, y, 0, w_.rows, true);
  }

  bool has_gemv_slices() const override { return true; }
  RowSlice gemv_slice(const float* x, int part, int parts, float* y) const override {
    const int64_t r0 = w_.rows * part / parts, r1 = w_.rows * (part + 1) / parts;
    rows(x, 1, y, r0, r1, false);
    return {r0, r1};
  }

  void dequantize_row(int64_t r, float* out) const override {
    if (r < 0 || r >= w_.rows) user_error("row {} outside a weight of {} rows", r, w_.rows);
    decode_row(r, out);
  }

  int64_t in_features() const override { return w_.cols; }
  int64_t out_features() const override { return w_.rows; }
  size_t weight_bytes() const override { return w_.nbytes; }
  bool borrows_weights() const override { return true; }
  std::string kind() const override {
    std::string k = std::string("gguf-") + row_->name;
    for (char& ch : k) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    if (dot_i8_) k += "-a8";
    return compute_ == Compute::BF16 && fam_ && fam_->a_bytes == 2 ? k + "-bf16" : k;
  }

 private:
  // f(r, row bytes) for rows [r0, r1), shared by the OpenMP threads when `threads`.
  template <class F>
  void each_row(int64_t r0, int64_t r1, bool threads, F f) const {
#pragma omp parallel for schedule(dynamic, 32) if (threads && (r1 - r0) * w_.cols > (1 << 16))
    for (int64_t r = r0; r < r1; ++r) f(r, row_bytes(r));
  }

  const uint8_t* row_bytes(int64_t r) const {
    return w_.data + size_t(w_.row_of.empty() ? r : w_.row_of[size_t(r)]) * w_.row_bytes;
  }

  // Output rows [r0, r1) for m tokens by dot products: the values never stored where a fused dot
  // is written (ggml_decode.h), else each row decoded once and dotted with every token.
  void rows(const float* x, int64_t m, float* y, int64_t r0, int64_t r1, bool threads) const {
    const float* bias = bias_.empty() ? nullptr : bias_.data();
    const int64_t n = w_.rows;
    if (dot_i8_ && kernel_level() >= KernelLevel::AVX512) {  // llama.cpp's arithmetic: int8 tokens
      thread_local std::vector<kernels::GgmlTokenI8> tokens;
      tokens.resize(size_t(m));
      for (int64_t t = 0; t < m; ++t) kernels::ggml_quantize_token(x + t * w_.cols, w_.cols, &tokens[size_t(t)]);
      const std::vector<kernels::GgmlTokenI8>& tok = tokens;  // the caller's, shared with the team
      each_row(r0, r1, threads, [&](int64_t r, const uint8_t* row) {
        for (int64_t t = 0; t < m; ++t) y[t * n + r] = dot_i8_(row, tok[size_t(t)], blocks_) + (bias ? bias[r] : 0.0f);
      });
      return;
    }
    if (simd_dot_ && kernel_level() >= KernelLevel::AVX512) {
      each_row(r0, r1, threads, [&](int64_t r, const uint8_t* row) {
        for (int64_t t = 0; t < m; ++t)
          y[t * n + r] = simd_dot_(row, x + t * w_.cols, blocks_) + (bias ? bias[r] : 0.0f);
      });
      return;
    }
    const RowDecoder decode = [this](int64_t r, float* out) { decode_row(r, out); };
    decoded_row_dots(n, w_.cols, decode, x, m, bias, y, r0, r1, threads, kernel_level());
  }

  void decode_row(int64_t r, float* out) const {
    const bool simd = simd_ && kernel_level() >= KernelLevel::AVX512;  // the level may be lowered later
    (simd ? simd_ : row_->to_float)(row_bytes(r), out, blocks_);
  }

  GgmlWeight w_;
  const GgmlTypeRow* row_;
  Compute compute_;
  const kernels::Family* fam_;
  size_t blocks_ = 0;
  kernels::GgmlDecodeFn simd_ = nullptr;   // the same values as row_->to_float, or null
  kernels::GgmlDotFn simd_dot_ = nullptr;  // those values dotted with a token, or null
  kernels::GgmlDotI8Fn dot_i8_ = nullptr;  // int8 tokens instead (opt-in), or null
  std::vector<float> bias_;
};

}  // namespace

std::unique_ptr<Linear> make_ggml_linear(GgmlWeight w, const float* bias, Compute compute, bool int8_tokens) {
  return std::make_unique<GgmlLinear>(std::move(w), bias, compute, int8_tokens);
}

}  // namespace qt
