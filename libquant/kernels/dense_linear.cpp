// make_dense_linear: packs W once for the kernel family of the current kernel level, and drives
// the family's microkernel over y's tiles with OpenMP.
//
// Work split: the tiles (panel p, row block q) are numbered panel-major and each thread takes
// one contiguous range, so threads are balanced to a tile whatever the shape (few wide panels
// at small N, many at the lm_head) and each thread reuses its panel slice across all its rows.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "fmt/format.h"
#include "libquant/cpu_features.h"
#include "libquant/kernels/aligned_buffer.h"
#include "libquant/kernels/bf16.h"
#include "libquant/kernels/gemm.h"
#include "libquant/model/linear.h"
#include "libquant/parallel.h"

namespace qt {
namespace {

using kernels::Family;
}  // namespace
namespace kernels {
Tuning& tuning() {
  static Tuning t;
  return t;
}
}  // namespace kernels
namespace {

// Below this many multiply-adds a second thread costs more than it saves.
constexpr int64_t kMinMacsPerThread = 1 << 16;

void note_once(const char* msg) {
  static std::once_flag flag;
  std::call_once(flag, [&] { std::fprintf(stderr, "note: %s\n", msg); });
}

const Family* pick_family(Compute compute) {
  const KernelLevel lvl = kernel_level();
  if (compute == Compute::BF16) {
    if (lvl == KernelLevel::AVX512 && cpu_features().avx512_bf16)
      return kernels::family_bf16_avx512();
    if (!cpu_features().avx512_bf16)
      note_once("this CPU has no AVX512-BF16: bf16 weights are multiplied with fp32 FMAs "
                "(same results, fp32 speed)");
    return lvl >= KernelLevel::AVX2 ? kernels::family_bf16_avx2() : nullptr;
  }
  if (lvl == KernelLevel::AVX512) return kernels::family_f32_avx512();
  if (lvl == KernelLevel::AVX2) return kernels::family_f32_avx2();
  return nullptr;
}

// Per-thread scratch for converted activations, reused across calls.
kernels::AlignedBuffer& scratch() {
  thread_local kernels::AlignedBuffer buf;
  return buf;
}

class DenseLinear final : public Linear {
 public:
  DenseLinear(const float* w, int64_t out, int64_t in, const float* bias, Compute compute)
      : n_(out), k_(in), compute_(compute), fam_(pick_family(compute)) {
    if (bias) bias_.assign(bias, bias + out);
    if (!fam_) {  // scalar reference keeps the HF layout
      if (compute == Compute::BF16) {
        ref_bf16_.resize(size_t(out * in));
        for (size_t i = 0; i < ref_bf16_.size(); ++i) ref_bf16_[i] = kernels::round_bf16(w[i]);
      } else {
        ref_f32_.assign(w, w + out * in);
      }
      return;
    }
    const int64_t panels = (n_ + fam_->nr - 1) / fam_->nr;
    panel_bytes_ = fam_->panel_bytes(k_);
    packed_.reserve(panel_bytes_ * size_t(panels));
    auto* base = static_cast<char*>(packed_.data());
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < panels; ++p) {
      int cols = int(std::min<int64_t>(fam_->nr, n_ - p * fam_->nr));
      fam_->pack_panel(w, k_, p * fam_->nr, cols, base + size_t(p) * panel_bytes_);
    }
  }

  void forward(const float* x, int64_t m, float* y) const override {
    if (m <= 0) return;
    const float* bias = bias_.empty() ? nullptr : bias_.data();
    if (!fam_) return forward_ref(x, m, y, bias);

    const Family& f = *fam_;
    const int64_t kp = f.k_padded(k_);
    const void* a = x;
    int64_t lda = k_;
    if (f.convert_a) {
      a = scratch().reserve(size_t(m) * size_t(kp) * size_t(f.a_bytes));
      lda = kp;
    }
    const int64_t panels = (n_ + f.nr - 1) / f.nr;
    const int64_t rblocks = (m + f.mr - 1) / f.mr;
    const int64_t tiles = panels * rblocks;
    const int64_t macs = m * n_ * k_;
    int nt = int(std::min<int64_t>({num_threads(), tiles, std::max<int64_t>(1, macs / kMinMacsPerThread)}));

    auto body = [&](int t, int T) {
      if (f.convert_a) {
        int64_t r0 = m * t / T, r1 = m * (t + 1) / T;
        f.convert_rows(x + r0 * k_, r1 - r0, k_,
                       static_cast<char*>(const_cast<void*>(a)) + size_t(r0 * lda) * f.a_bytes);
        if (T > 1) {
#pragma omp barrier
        }
      }
      run_tiles(f, tiles * t / T, tiles * (t + 1) / T, rblocks, a, lda, m, y, bias);
    };
    if (nt <= 1) {
      body(0, 1);
    } else {
#pragma omp parallel num_threads(nt)
      body(omp_get_thread_num(), omp_get_num_threads());
    }
  }

  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  size_t weight_bytes() const override {
    if (fam_) return panel_bytes_ * size_t((n_ + fam_->nr - 1) / fam_->nr);
    return compute_ == Compute::BF16 ? ref_bf16_.size() * 2 : ref_f32_.size() * 4;
  }
  std::string kind() const override { return compute_ == Compute::BF16 ? "bf16" : "f32"; }

 private:
  // Tiles [t0, t1) in panel-major order; for each panel, K slices outside, row blocks inside,
  // so the KC×NR slice of the panel stays in L1 while the rows stream past it.
  void run_tiles(const Family& f, int64_t t0, int64_t t1, int64_t rblocks, const void* a,
                 int64_t lda, int64_t m, float* y, const float* bias) const {
    const int64_t kcs = kernels::tuning().kc ? kernels::tuning().kc : f.kc;
    const int64_t mcb = kernels::tuning().mc ? std::max<int64_t>(1, kernels::tuning().mc / f.mr) : rblocks;
    const int64_t kp = f.k_padded(k_);
    const auto* packed = static_cast<const char*>(packed_.data());
    const int64_t p_first = t0 / rblocks, p_last = (t1 - 1) / rblocks;
    for (int64_t c0 = 0; c0 < rblocks; c0 += mcb) {
      for (int64_t p = p_first; p <= p_last; ++p) {
        const int64_t q0 = std::max({t0 - p * rblocks, c0, int64_t(0)});
        const int64_t q1 = std::min({t1 - p * rblocks, c0 + mcb, rblocks});
        if (q0 >= q1) continue;
        const int64_t n0 = p * f.nr;
        const int cols = int(std::min<int64_t>(f.nr, n_ - n0));
        const char* panel = packed + size_t(p) * panel_bytes_;
        for (int64_t k0 = 0; k0 < kp; k0 += kcs) {
          const int64_t kc = std::min<int64_t>(kcs, kp - k0);
          const char* b = panel + size_t(k0) * size_t(f.nr) * size_t(f.b_bytes);
          for (int64_t q = q0; q < q1; ++q) {
            const int64_t m0 = q * f.mr;
            const int rows = int(std::min<int64_t>(f.mr, m - m0));
            const char* ap = static_cast<const char*>(a) + size_t(m0 * lda + k0) * size_t(f.a_bytes);
            f.tile(rows, cols, kc, ap, lda, b, y + m0 * n_ + n0, n_, k0 == 0,
                   bias ? bias + n0 : nullptr);
          }
        }
      }
    }
  }

  void forward_ref(const float* x, int64_t m, float* y, const float* bias) const {
    int nt = int(std::min<int64_t>({num_threads(), m, std::max<int64_t>(1, m * n_ * k_ / kMinMacsPerThread)}));
#pragma omp parallel for schedule(static) num_threads(std::max(nt, 1))
    for (int64_t r = 0; r < m; ++r) {
      if (compute_ == Compute::BF16)
        kernels::gemm_ref_bf16(x + r * k_, ref_bf16_.data(), bias, 1, n_, k_, y + r * n_);
      else
        kernels::gemm_ref_f32(x + r * k_, ref_f32_.data(), bias, 1, n_, k_, y + r * n_);
    }
  }

  int64_t n_, k_;
  Compute compute_;
  const Family* fam_;
  std::vector<float> bias_;
  kernels::AlignedBuffer packed_;
  size_t panel_bytes_ = 0;
  std::vector<float> ref_f32_;
  std::vector<uint16_t> ref_bf16_;
};

}  // namespace

std::unique_ptr<Linear> make_dense_linear(const float* w, int64_t out, int64_t in,
                                          const float* bias, Compute compute) {
  return std::make_unique<DenseLinear>(w, out, in, bias, compute);
}

}  // namespace qt
