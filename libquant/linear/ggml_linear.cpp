// make_ggml_linear (ggml_linear.h).
#include "libquant/linear/ggml_linear.h"

#include <algorithm>
#include <cctype>

#include "formats/error.h"
#include "formats/ggml_blocks.h"
#include "libquant/cpu_features.h"
#include "libquant/kernels/ggml_decode.h"
#include "libquant/kernels/aligned_buffer.h"
#include "libquant/kernels/ggml_token_i8.h"
#include "libquant/kernels/ggml_interleaved.h"
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
    dot_order_ = kernels::ggml_dot_token_order(w_.type);
    // At the AVX-512 level only (the int8 path's condition in rows()): below it the groups would cost
    // an unpack per row and no kernel would read them.
    if (int8_tokens && kernel_level() >= KernelLevel::AVX512 && (il_ = kernels::ggml_interleaved(w_.type)))
      interleave();
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
    const RowSlice rs = row_block_slice(w_.rows, part, parts);  // interleaved: whole groups
    rows(x, 1, y, rs.r0, rs.r1, false);
    return rs;
  }

  void dequantize_row(int64_t r, float* out) const override {
    if (r < 0 || r >= w_.rows) user_error("row {} outside a weight of {} rows", r, w_.rows);
    decode_row(r, out);
  }

  int64_t in_features() const override { return w_.cols; }
  int64_t out_features() const override { return w_.rows; }
  size_t weight_bytes() const override { return il_ ? size_t(groups()) * group_bytes() : w_.nbytes; }
  bool borrows_weights() const override { return !il_; }
  std::string kind() const override {
    std::string k = std::string("gguf-") + row_->name;
    for (char& ch : k) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    if (il_) k += "-a8";
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

  // The rows, in their computed (HF) order, as interleaved groups of 16 (the last padded with zero
  // rows); the file's pages are let go of once copied (the copy is the weight now).
  void interleave() {
    uint8_t* dst = static_cast<uint8_t*>(groups_.reserve(size_t(groups()) * group_bytes()));
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t g = 0; g < groups(); ++g) {
      const uint8_t* rows[16];
      for (int i = 0; i < 16; ++i) rows[i] = 16 * g + i < w_.rows ? row_bytes(16 * g + i) : nullptr;
      il_->pack(rows, blocks_, dst + size_t(g) * group_bytes());
    }
    if (w_.mapped) release_pages(w_.data, w_.nbytes);
    w_.data = nullptr;
    simd_dot_ = nullptr;  // it reads the file's rows
  }
  int64_t groups() const { return (w_.rows + 15) / 16; }
  size_t group_bytes() const { return blocks_ * il_->group_block_bytes; }
  const uint8_t* group(int64_t g) const {
    return static_cast<const uint8_t*>(groups_.data()) + size_t(g) * group_bytes();
  }

  // Output rows [r0, r1) for m tokens by dot products: the values never stored where a fused dot
  // is written (ggml_decode.h), else each row decoded once and dotted with every token.
  void rows(const float* x, int64_t m, float* y, int64_t r0, int64_t r1, bool threads) const {
    const float* bias = bias_.empty() ? nullptr : bias_.data();
    const int64_t n = w_.rows;
    if (il_ && kernel_level() >= KernelLevel::AVX512) {  // int8 tokens, as llama.cpp; 16 rows a call
      thread_local std::vector<kernels::GgmlTokenI8> tokens;
      tokens.resize(size_t(m));
      for (int64_t t = 0; t < m; ++t) kernels::ggml_quantize_token(x + t * w_.cols, w_.cols, &tokens[size_t(t)]);
      const std::vector<kernels::GgmlTokenI8>& tok = tokens;  // the caller's, shared with the team
      const int64_t g0 = r0 / 16, g1 = (r1 + 15) / 16;        // r0: a group's first row (gemv_slice, or 0)
      const int64_t chunks = (g1 - g0 + 3) / 4;               // the kernel walks up to 4 groups side by side
#pragma omp parallel for schedule(dynamic, 1) if (threads && (r1 - r0) * w_.cols > (1 << 16))
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t g = g0 + 4 * c;
        const int count = int(std::min<int64_t>(4, g1 - g));
        alignas(64) float out[64];
        const int64_t rows = std::min<int64_t>(16 * count, r1 - 16 * g);
        for (int64_t t = 0; t < m; ++t) {
          il_->gemv(group(g), group_bytes(), count, tok[size_t(t)], blocks_, out);
          for (int64_t i = 0; i < rows; ++i) y[t * n + 16 * g + i] = out[i] + (bias ? bias[16 * g + i] : 0.0f);
        }
      }
      return;
    }
    if (simd_dot_ && kernel_level() >= KernelLevel::AVX512) {
      const float* xd = x;
      if (dot_order_) {  // the dot's token order: each caller (a team thread's slice) its own copy
        thread_local std::vector<float> ordered;
        ordered.resize(size_t(m * w_.cols));
        for (int64_t t = 0; t < m; ++t) dot_order_(x + t * w_.cols, blocks_, ordered.data() + t * w_.cols);
        xd = ordered.data();
      }
      each_row(r0, r1, threads, [&](int64_t r, const uint8_t* row) {
        for (int64_t t = 0; t < m; ++t)
          y[t * n + r] = simd_dot_(row, xd + t * w_.cols, blocks_) + (bias ? bias[r] : 0.0f);
      });
      return;
    }
    const RowDecoder decode = [this](int64_t r, float* out) { decode_row(r, out); };
    decoded_row_dots(n, w_.cols, decode, x, m, bias, y, r0, r1, threads, kernel_level());
  }

  void decode_row(int64_t r, float* out) const {
    const bool simd = simd_ && kernel_level() >= KernelLevel::AVX512;  // the level may be lowered later
    const uint8_t* src = nullptr;
    if (il_) {  // the row's blocks back out of its group
      thread_local std::vector<uint8_t> blocks;
      blocks.resize(w_.row_bytes);
      il_->unpack(group(r / 16), int(r % 16), blocks_, blocks.data());
      src = blocks.data();
    } else {
      src = row_bytes(r);
    }
    (simd ? simd_ : row_->to_float)(src, out, blocks_);
  }

  GgmlWeight w_;
  const GgmlTypeRow* row_;
  Compute compute_;
  const kernels::Family* fam_;
  size_t blocks_ = 0;
  kernels::GgmlDecodeFn simd_ = nullptr;           // the same values as row_->to_float, or null
  kernels::GgmlDotFn simd_dot_ = nullptr;          // those values dotted with a token, or null
  kernels::GgmlTokenOrderFn dot_order_ = nullptr;  // the token order simd_dot_ reads, or null: as it is
  const kernels::GgmlInterleaved* il_ = nullptr;   // int8 tokens over interleaved groups, or null
  kernels::AlignedBuffer groups_;                  // il_'s groups (the weight; w_.data let go of)
  std::vector<float> bias_;
};

}  // namespace

std::unique_ptr<Linear> make_ggml_linear(GgmlWeight w, const float* bias, Compute compute, bool int8_tokens) {
  return std::make_unique<GgmlLinear>(std::move(w), bias, compute, int8_tokens);
}

}  // namespace qt
