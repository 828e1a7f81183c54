// The integer packed Linear (W8A8 int8 / int8_ct, W4A8 int4): activations quantized per token
// to int8 (quantize_activations_int8), exact int32 dot products per group, then the epilogue of
// reference_gemm in the same fp32 order — y = s_x · (Σ_g s_w[g] · float(acc_g)), multiply and add
// rounded separately — so every kernel level gives the reference's bits.
//
// In memory the codes are signed int8 for every scheme (int4: u − 8, unpacked at load: the
// prefill kernel is compute-bound, and one byte per code lets W4A8 share the VNNI kernel).
// Without VNNI, AVX2 (kernels/int8_avx2.cpp) runs on the row-major codes with the same epilogue.
// AVX-512 VNNI layout (kernels/int8_vnni.cpp): panels of 16 output rows, k-major in blocks of 4
// (one dword = 4 consecutive k of one row, VPDPBUSD's operand), with per-(panel, group) column
// sums so that the unsigned activations a + 128 can be used: Σ(a+128)·w − 128·Σw = Σa·w.
#pragma GCC optimize("fp-contract=off")
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "formats/error.h"
#include "libquant/cpu_features.h"
#include "libquant/kernels/aligned_buffer.h"
#include "libquant/kernels/int8_amx.h"
#include "libquant/kernels/int8_avx2.h"
#include "libquant/kernels/int8_gemv_avx2.h"
#include "libquant/kernels/int8_vnni.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/parallel.h"
#include "libquant/schemes/packed_values.h"

namespace qt {
namespace {

// Below one A tile of tokens (16 rows) the AMX tiles would multiply padding rows; the VNNI tiles,
// which give the same bits, take those calls (the decode step among them).
constexpr int64_t kAmxMinTokens = 16;

using namespace schemes_detail;

class IntLinear final : public Linear {
 public:
  IntLinear(PackedTensor w, const float* bias, const PackedLinearOptions& opt)
      : n_(w.rows), k_(w.cols), params_(w.params), act_(opt.act) {
    if (act_ == ActMode::Default) act_ = ActMode::Int8PerToken;
    if (bias) bias_.assign(bias, bias + n_);
    ng_ = n_groups(params_, k_);
    gl_ = group_len(params_, k_);
    // Signed codes [n, k] and fp32 scales [n, ng], from the stored layout (scheme.h).
    s_.resize(size_t(n_ * ng_));
    for (size_t i = 0; i < s_.size(); ++i) s_[i] = load_float(w.scales, i);
    const bool vnni = kernel_level() >= KernelLevel::AVX512 && cpu_features().avx512_vnni && gl_ % 4 == 0;
    amx_ = vnni && kernel_level() >= KernelLevel::AMX && kernels::int8_amx_supports(gl_);
    if (w.data.dtype != DType::U8) {  // int8 rows store I8 codes; int4 two a byte (U8)
      if (vnni) {                     // packed for VPDPBUSD straight from the stored bytes
        vnni_ = kernels::pack_int8_vnni(reinterpret_cast<const int8_t*>(w.data.data), s_.data(), n_, k_, gl_);
        return;
      }
      // Row-major signed codes are what the AVX2 and scalar kernels read: use the stored (mapped)
      // bytes in place. A copy would cost a fresh page per 4 KiB — at 8 GB, mostly the kernel
      // zeroing pages — and hold both copies until the source's pages were released.
      w_ = std::move(w);
      qp_ = reinterpret_cast<const int8_t*>(w_.data.data);
      return;
    }
    // int4: one signed byte per code, so that W4A8 shares every int8 kernel.
    q_.resize(size_t(n_ * k_));
    for (int64_t n = 0; n < n_; ++n) {
      const uint8_t* row = w.data.data + n * (k_ / 2);
      for (int64_t j = 0; j < k_; j += 2) {
        q_[size_t(n * k_ + j)] = int8_t(int(row[j / 2] >> 4) - 8);
        q_[size_t(n * k_ + j + 1)] = int8_t(int(row[j / 2] & 0x0f) - 8);
      }
    }
    if (vnni) {
      vnni_ = kernels::pack_int8_vnni(q_.data(), s_.data(), n_, k_, gl_);
      q_.clear();
      q_.shrink_to_fit();
    }
    qp_ = q_.data();
  }

  bool borrows_weights() const override { return w_.data.data != nullptr; }

  void forward(const float* x, int64_t m, float* y) const override {
    if (m <= 0) return;
    if (act_ == ActMode::None) {
      forward_float(x, m, y);
    } else if (uses_amx(m)) {
      kernels::gemm_int8_amx_f32(vnni_, x, m, y);
    } else if (!vnni_.panels.empty()) {
      kernels::gemm_int8_vnni_f32(vnni_, x, m, y);
    } else {
      thread_local std::vector<int8_t> a;
      thread_local std::vector<float> sx;
      a.resize(size_t(m * k_));
      sx.resize(size_t(m));
      if (kernel_level() >= KernelLevel::AVX2 && kernels::int8_avx2_supports(gl_)) {
        kernels::quantize_activations_int8_avx2(x, m, k_, a.data(), sx.data());
        kernels::gemm_s8s8_avx2(qp_, s_.data(), n_, k_, gl_, a.data(), sx.data(), m, y);
      } else {
        quantize_activations_int8(x, m, k_, a.data(), sx.data());
        forward_scalar(a.data(), sx.data(), m, y);
      }
    }
    if (!bias_.empty())
      for (int64_t t = 0; t < m; ++t)
        for (int64_t n = 0; n < n_; ++n) y[t * n_ + n] += bias_[size_t(n)];
  }

  // q/k/v or gate/up on the AMX or the VNNI path: one quantization of x, one OpenMP loop (int8_amx.h,
  // int8_vnni.h).
  bool forward_shared(const Linear* const* ls, int count, const float* x, int64_t m, float* const* ys) const override {
    if (count < 2 || count > 4 || m <= 0) return false;
    const kernels::Int8Vnni* ws[4];
    int amx = 0, vnni = 0;
    for (int i = 0; i < count; ++i) {
      const auto* l = dynamic_cast<const IntLinear*>(ls[i]);
      if (!l || !l->bias_.empty() || l->k_ != k_) return false;
      amx += l->uses_amx(m);
      vnni += l->uses_vnni(m);
      ws[i] = &l->vnni_;
    }
    if (amx == count)
      kernels::gemm_int8_amx_f32_shared(ws, count, x, m, ys);
    else if (vnni == count)
      kernels::gemm_int8_vnni_f32_shared(ws, count, x, m, ys);
    else
      return false;
    return true;
  }

  // The decode step's slice (linear.h): the token quantized on this thread (a few hundred values,
  // cheaper than sharing it), then the VNNI tiles over whole panels or the AVX2 GEMV over rows —
  // the kernels forward() would pick, at one token.
  bool has_gemv_slices() const override {
    return act_ != ActMode::None &&
           (!vnni_.panels.empty() || (kernel_level() >= KernelLevel::AVX2 && kernels::int8_avx2_supports(gl_)));
  }
  RowSlice gemv_slice(const float* x, int part, int parts, float* y) const override {
    RowSlice rs;
    if (!vnni_.panels.empty()) {
      thread_local std::vector<uint8_t> au;
      au.resize(size_t(k_));
      float sx;
      kernels::quantize_token_u8_vnni(x, k_, au.data(), &sx);
      const int64_t p0 = vnni_.n_panels * part / parts, p1 = vnni_.n_panels * (part + 1) / parts;
      kernels::gemv_u8_vnni(vnni_, au.data(), sx, p0, p1, y);
      rs = {std::min(n_, p0 * 16), std::min(n_, p1 * 16)};
    } else {
      thread_local std::vector<int8_t> a;
      a.resize(size_t(k_));
      float sx;
      kernels::quantize_activations_int8_avx2(x, 1, k_, a.data(), &sx);
      rs = row_block_slice(n_, part, parts);
      kernels::gemv_s8s8_avx2(qp_, s_.data(), k_, gl_, a.data(), sx, rs.r0, rs.r1, y);
    }
    if (!bias_.empty())
      for (int64_t n = rs.r0; n < rs.r1; ++n) y[n] += bias_[size_t(n)];
    return rs;
  }

  // Row r as dequantize_weights gives it (an int8/int4 embedding table tied to the output head).
  void dequantize_row(int64_t r, float* out) const override {
    if (r < 0 || r >= n_) user_error("row {} outside a weight of {} rows", r, n_);
    const GridRule& rule = find_scheme(params_.scheme).grid;  // the row's dequantization of a code
    for (int64_t k = 0; k < k_; ++k) out[k] = rule.value(code(r, k), {scale(r, k / gl_), 0.0f}, params_);
  }

  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  size_t weight_bytes() const override {
    return vnni_.panels.empty() ? size_t(n_ * k_) + s_.size() * 4 : vnni_.bytes();
  }
  std::string kind() const override {
    std::string k = params_.bits == 4 ? "w4a8" : "w8a8";
    if (params_.group_size) k += "-g" + std::to_string(params_.group_size);
    return act_ == ActMode::None ? k + "-fp-act" : k;
  }

 private:
  // Whether forward() takes gemm_int8_amx_f32 / gemm_int8_vnni_f32 at m tokens.
  bool uses_amx(int64_t m) const { return act_ != ActMode::None && amx_ && m >= kAmxMinTokens; }
  bool uses_vnni(int64_t m) const { return act_ != ActMode::None && !uses_amx(m) && !vnni_.panels.empty(); }
  int8_t code(int64_t n, int64_t k) const { return vnni_.panels.empty() ? qp_[n * k_ + k] : vnni_.code(n, k); }
  float scale(int64_t n, int64_t g) const { return s_[size_t(n * ng_ + g)]; }

  // reference_gemm's Int8PerToken loop over the packed codes.
  void forward_scalar(const int8_t* a, const float* sx, int64_t m, float* y) const {
#pragma omp parallel for schedule(dynamic, 16) if (m * n_ * k_ > (1 << 17))
    for (int64_t n = 0; n < n_; ++n) {
      const int8_t* qn = qp_ + n * k_;
      for (int64_t t = 0; t < m; ++t) {
        const int8_t* at = a + t * k_;
        float sum = 0.0f;
        for (int64_t g = 0; g < ng_; ++g) {
          int32_t acc = 0;
          for (int64_t k = g * gl_; k < (g + 1) * gl_; ++k) acc += int32_t(at[k]) * int32_t(qn[k]);
          sum += scale(n, g) * float(acc);
        }
        y[t * n_ + n] = sx[t] * sum;
      }
    }
  }

  // The decode path without activation quantization: fp32 x times the dequantized weights.
  void forward_float(const float* x, int64_t m, float* y) const {
#pragma omp parallel for schedule(dynamic, 16) if (m * n_ * k_ > (1 << 17))
    for (int64_t n = 0; n < n_; ++n) {
      std::vector<float> row(static_cast<size_t>(k_));
      for (int64_t k = 0; k < k_; ++k) row[size_t(k)] = float(code(n, k)) * scale(n, k / gl_);
      for (int64_t t = 0; t < m; ++t) {
        const float* xt = x + t * k_;
        float acc = 0.0f;
        for (int64_t k = 0; k < k_; ++k) acc += xt[k] * row[size_t(k)];
        y[t * n_ + n] = acc;
      }
    }
  }

  int64_t n_, k_, ng_ = 1, gl_ = 0;
  SchemeParams params_;
  ActMode act_;
  std::vector<float> bias_;
  PackedTensor w_;              // the stored tensor, when its int8 codes are used in place
  std::vector<int8_t> q_;       // [n, k] signed codes made at load (int4 unpacked)
  const int8_t* qp_ = nullptr;  // the [n, k] codes the AVX2/scalar kernels read: w_'s or q_'s
  std::vector<float> s_;        // [n, ng] fp32 scales
  kernels::Int8Vnni vnni_;
  bool amx_ = false;  // forward() runs the AMX tiles on vnni_ (the same bits as the VNNI tiles)
};

}  // namespace

std::unique_ptr<Linear> make_int_linear(PackedTensor w, const float* bias, const PackedLinearOptions& opt) {
  return std::make_unique<IntLinear>(std::move(w), bias, opt);
}

}  // namespace qt
