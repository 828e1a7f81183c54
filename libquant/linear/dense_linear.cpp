// make_dense_linear: packs W once for the kernel family of the current kernel level, and drives
// the family's microkernel over y's tiles with OpenMP.
//
// Work: the tiles (panel p, row block q) are numbered panel-major and cut into contiguous
// chunks that threads take from an atomic counter. Panel-major keeps a thread on one panel for
// many rows (the panel stays in L2); taking chunks dynamically keeps both cores busy when the
// machine is shared and one of our threads loses its core for a while.
// Inside a chunk, rows are processed in row chunks sized so their activations stay in L2 while
// the panels of the chunk stream past them (the lm_head has 1024 panels).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "formats/error.h"
#include "libquant/cpu_features.h"
#include "libquant/kernels/aligned_buffer.h"
#include "libquant/kernels/bf16.h"
#include "libquant/kernels/gemm.h"
#include "libquant/linear/linear.h"
#include "libquant/parallel.h"

namespace qt {
namespace {

using kernels::Family;

// Below this many multiply-adds per thread a second thread costs more than it saves.
constexpr int64_t kMinMacsPerThread = 1 << 17;
// Activations of one row chunk should fit in this part of L2 beside the panel.
constexpr int64_t kRowChunkBytes = 512 << 10;
// Work chunks per thread: enough to even out a thread that lost its core for a while.
constexpr int64_t kChunksPerThread = 8;

void note_once(const char* msg) {
  static std::once_flag flag;
  std::call_once(flag, [&] { std::fprintf(stderr, "note: %s\n", msg); });
}

const Family* pick_family(Compute compute, bool quiet) {
  const KernelLevel lvl = kernel_level();
  if (compute == Compute::BF16) {
    if (lvl >= KernelLevel::AMX) return kernels::family_bf16_amx();
    if (lvl >= KernelLevel::AVX512 && cpu_features().avx512_bf16) return kernels::family_bf16_avx512();
    if (!cpu_features().avx512_bf16 && !quiet)
      note_once(
          "this CPU has no AVX512-BF16: bf16 weights are multiplied with fp32 FMAs "
          "(same results, fp32 speed)");
    return lvl >= KernelLevel::AVX2 ? kernels::family_bf16_avx2() : nullptr;
  }
  if (lvl >= KernelLevel::AVX512) return kernels::family_f32_avx512();
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
      : n_(out), k_(in), compute_(compute), fam_(pick_family(compute, false)) {
    if (bias) bias_.assign(bias, bias + out);
    if (!fam_) {
      init_ref(w);
      return;
    }
    pack([&](int64_t n0, int cols, void* dst) { fam_->pack_panel(w, k_, n0, cols, dst); });
  }

  // From a tensor of any float dtype, converted one panel of rows at a time on the thread that
  // packs it: no fp32 copy of the whole matrix (2x a bf16 source's bytes) is ever made, and the
  // conversion runs in parallel.
  DenseLinear(const Tensor& w, const float* bias, Compute compute)
      : n_(w.shape.at(0)), k_(w.shape.at(1)), compute_(compute), fam_(pick_family(compute, false)) {
    if (bias) bias_.assign(bias, bias + n_);
    if (!fam_) {
      init_ref(to_f32(w).data());
      return;
    }
    pack([&](int64_t n0, int cols, void* dst) {
      thread_local std::vector<float> rows;
      rows.resize(size_t(cols) * size_t(k_));
      to_f32_range(w, size_t(n0) * size_t(k_), rows.size(), rows.data());
      fam_->pack_panel(rows.data(), k_, 0, cols, dst);
    });
  }

  void forward(const float* x, int64_t m, float* y) const override {
    if (m <= 0) return;
    if (!fam_) return forward_ref(x, m, y, bias_.empty() ? nullptr : bias_.data());
    const DenseLinear* self = this;
    forward_group(&self, 1, x, m, &y);
  }

  // y_i = x · W_iᵀ for count Linears of one family and one K, in one fork: x is converted once
  // (every thread its share of rows, one barrier), then the threads take chunks of all the
  // Linears' tiles from one counter. Each tile computes exactly what forward() computes for it,
  // so every y_i has forward()'s bits; what it saves is count−1 forks, joins and conversions of
  // the same activations (q/k/v, gate/up read one normed x).
  static void forward_group(const DenseLinear* const* ls, int count, const float* x, int64_t m, float* const* ys) {
    const DenseLinear& l0 = *ls[0];
    const Family& f = *l0.fam_;
    const auto& tune = kernels::tuning();
    Plan pl;
    pl.kp = f.k_padded(l0.k_);
    pl.kc = tune.kc ? tune.kc : f.kc;
    pl.a = x;
    pl.lda = l0.k_;
    if (f.convert_a) {
      pl.a = scratch().reserve(size_t(m) * size_t(pl.kp) * size_t(f.a_bytes));
      pl.lda = pl.kp;
    }
    pl.m = m;
    pl.rblocks = (m + f.mr - 1) / f.mr;
    const int64_t mc_rows = tune.mc ? tune.mc : kRowChunkBytes / (pl.kp * f.a_bytes);
    pl.mcb = std::max<int64_t>(1, mc_rows / f.mr);
    int64_t tiles[kMaxGroup], macs = 0, max_tiles = 0;
    for (int i = 0; i < count; ++i) {
      tiles[i] = (ls[i]->n_ + f.nr - 1) / f.nr * pl.rblocks;
      macs += m * ls[i]->n_ * l0.k_;
      max_tiles = std::max(max_tiles, tiles[i]);
    }
    const int nt = int(std::clamp<int64_t>(macs / kMinMacsPerThread, 1, std::min<int64_t>(num_threads(), max_tiles)));
    auto bias_of = [&](int i) { return ls[i]->bias_.empty() ? nullptr : ls[i]->bias_.data(); };
    if (nt == 1) {
      if (f.convert_a) f.convert_rows(x, m, l0.k_, const_cast<void*>(pl.a));
      for (int i = 0; i < count; ++i) ls[i]->run_tiles(f, pl, 0, tiles[i], ys[i], bias_of(i));
      return;
    }
    // Chunks of Linear i are numbered after those of Linears 0..i−1.
    int64_t first_chunk[kMaxGroup + 1] = {0};
    for (int i = 0; i < count; ++i)
      first_chunk[i + 1] =
          first_chunk[i] + std::min<int64_t>(tiles[i], nt * (tune.chunks ? tune.chunks : kChunksPerThread));
    const int64_t chunks = first_chunk[count];
    std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      if (f.convert_a) {
        const int64_t r0 = m * t / T, r1 = m * (t + 1) / T;
        f.convert_rows(x + r0 * l0.k_, r1 - r0, l0.k_,
                       static_cast<char*>(const_cast<void*>(pl.a)) + size_t(r0 * pl.lda) * f.a_bytes);
#pragma omp barrier
      }
      int i = 0;
      for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
        while (c >= first_chunk[i + 1]) ++i;  // chunks come in increasing order to each thread
        const int64_t lc = c - first_chunk[i], nc = first_chunk[i + 1] - first_chunk[i];
        ls[i]->run_tiles(f, pl, tiles[i] * lc / nc, tiles[i] * (lc + 1) / nc, ys[i], bias_of(i));
      }
    }
  }

  bool forward_shared(const Linear* const* ls, int count, const float* x, int64_t n, float* const* ys) const override {
    if (count < 2 || count > kMaxGroup || n <= 0) return false;
    const DenseLinear* d[kMaxGroup] = {};
    for (int i = 0; i < count; ++i)
      if (!(d[i] = dynamic_cast<const DenseLinear*>(ls[i]))) return false;
    if (!can_group(d, count)) return false;
    forward_group(d, count, x, n, ys);
    return true;
  }

  // Whether forward_group can run these together: dense, one kernel family, one K.
  static bool can_group(const DenseLinear* const* ls, int count) {
    if (count < 1 || count > kMaxGroup) return false;
    for (int i = 0; i < count; ++i)
      if (!ls[i] || !ls[i]->fam_ || ls[i]->fam_ != ls[0]->fam_ || ls[i]->k_ != ls[0]->k_) return false;
    return true;
  }
  static constexpr int kMaxGroup = 4;

  // One token over whole panels [p0, p1): the family's tile at one row is already a GEMV that
  // streams each panel once (k-major, NR features per load), so the decode step needs no other
  // kernel — what it saves is the fork and the shared work counter of forward().
  bool has_gemv_slices() const override { return fam_ != nullptr; }
  RowSlice gemv_slice(const float* x, int part, int parts, float* y) const override {
    const Family& f = *fam_;
    const int64_t panels = (n_ + f.nr - 1) / f.nr;
    const int64_t p0 = panels * part / parts, p1 = panels * (part + 1) / parts;
    if (p0 >= p1) return {std::min(n_, p0 * f.nr), std::min(n_, p0 * f.nr)};
    const auto& tune = kernels::tuning();
    Plan pl;
    pl.kp = f.k_padded(k_);
    pl.kc = tune.kc ? tune.kc : f.kc;
    pl.a = x;
    pl.lda = k_;
    if (f.convert_a) {
      void* a = scratch().reserve(size_t(pl.kp) * size_t(f.a_bytes));
      f.convert_rows(x, 1, k_, a);
      pl.a = a;
      pl.lda = pl.kp;
    }
    pl.m = 1;
    pl.rblocks = 1;
    pl.mcb = 1;
    run_tiles(f, pl, p0, p1, y, bias_.empty() ? nullptr : bias_.data());
    return {p0 * f.nr, std::min(n_, p1 * f.nr)};
  }

  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  size_t weight_bytes() const override {
    if (fam_) return panel_bytes_ * size_t((n_ + fam_->nr - 1) / fam_->nr);
    return compute_ == Compute::BF16 ? ref_bf16_.size() * 2 : ref_f32_.size() * 4;
  }
  std::string kind() const override { return compute_ == Compute::BF16 ? "bf16" : "f32"; }

 private:
  struct Plan {
    const void* a;    // activations the tile reads (x, or its converted copy)
    int64_t lda;      // elements per row of a
    int64_t m;        // rows
    int64_t rblocks;  // row blocks of mr rows
    int64_t mcb;      // row blocks per row chunk
    int64_t kp, kc;   // padded K, K slice
  };

  // Tiles [t0, t1) of the panel-major numbering. For each row chunk, for each panel, for each
  // K slice, the row blocks: the KC×NR slice of the panel is reused from L1 by every row block,
  // and the row chunk's activations from L2 by every panel.
  void run_tiles(const Family& f, const Plan& pl, int64_t t0, int64_t t1, float* y, const float* bias) const {
    const auto* packed = static_cast<const char*>(packed_.data());
    if (pl.m == 1 && f.gemv) {  // one token: the tiles are the panels, streamed side by side
      f.gemv(pl.a, packed, panel_bytes_, t0, t1, n_, pl.kp, pl.kc, bias ? bias + t0 * f.nr : nullptr, y + t0 * f.nr);
      return;
    }
    const int64_t rb = pl.rblocks;
    const int64_t p_first = t0 / rb, p_last = (t1 - 1) / rb;
    const int64_t c_first = p_first == p_last ? t0 % rb : 0;
    const int64_t c_end = p_first == p_last ? t1 - p_last * rb : rb;
    for (int64_t c0 = c_first; c0 < c_end; c0 += pl.mcb) {
      for (int64_t p = p_first; p <= p_last; ++p) {
        const int64_t q0 = std::max({t0 - p * rb, c0, int64_t(0)});
        const int64_t q1 = std::min({t1 - p * rb, c0 + pl.mcb, rb});
        if (q0 >= q1) continue;
        const int64_t n0 = p * f.nr;
        const int cols = int(std::min<int64_t>(f.nr, n_ - n0));
        const char* panel = packed + size_t(p) * panel_bytes_;
        for (int64_t k0 = 0; k0 < pl.kp; k0 += pl.kc) {
          const int64_t kc = std::min<int64_t>(pl.kc, pl.kp - k0);
          const char* b = panel + size_t(k0) * size_t(f.nr) * size_t(f.b_bytes);
          for (int64_t q = q0; q < q1; ++q) {
            const int64_t m0 = q * f.mr;
            const int rows = int(std::min<int64_t>(f.mr, pl.m - m0));
            const char* ap = static_cast<const char*>(pl.a) + size_t(m0 * pl.lda + k0) * size_t(f.a_bytes);
            f.tile(rows, cols, kc, ap, pl.lda, b, y + m0 * n_ + n0, n_, k0 == 0, bias ? bias + n0 : nullptr);
          }
        }
      }
    }
  }

  void init_ref(const float* w) {  // the scalar reference keeps the HF layout
    if (compute_ == Compute::BF16) {
      ref_bf16_.resize(size_t(n_ * k_));
      for (size_t i = 0; i < ref_bf16_.size(); ++i) ref_bf16_[i] = kernels::round_bf16(w[i]);
    } else {
      ref_f32_.assign(w, w + n_ * k_);
    }
  }

  // Packs every panel with pack_one(n0, cols, dst), panels split over the threads.
  template <typename PackOne>
  void pack(const PackOne& pack_one) {
    const int64_t panels = (n_ + fam_->nr - 1) / fam_->nr;
    panel_bytes_ = fam_->panel_bytes(k_);
    packed_.reserve(panel_bytes_ * size_t(panels));
    auto* base = static_cast<char*>(packed_.data());
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < panels; ++p) {
      int cols = int(std::min<int64_t>(fam_->nr, n_ - p * fam_->nr));
      pack_one(p * fam_->nr, cols, base + size_t(p) * panel_bytes_);
    }
  }

  void forward_ref(const float* x, int64_t m, float* y, const float* bias) const {
    const int nt = int(std::clamp<int64_t>(m * n_ * k_ / kMinMacsPerThread, 1, std::min<int64_t>(num_threads(), m)));
#pragma omp parallel for schedule(static) num_threads(nt)
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

namespace kernels {
Tuning& tuning() {
  static Tuning t;
  return t;
}

const char* dense_kernel_name(Compute compute) {
  const Family* f = pick_family(compute, true);
  return f ? f->name : compute == Compute::BF16 ? "bf16-ref" : "f32-ref";
}
const Family* dense_family(Compute compute) { return pick_family(compute, false); }
}  // namespace kernels

std::unique_ptr<Linear> make_dense_linear(const float* w, int64_t out, int64_t in, const float* bias, Compute compute) {
  return std::make_unique<DenseLinear>(w, out, in, bias, compute);
}

std::unique_ptr<Linear> make_dense_linear(const Tensor& w, const float* bias, Compute compute) {
  if (!is_float(w.dtype) || w.shape.size() != 2)
    user_error("a dense Linear needs a float matrix, got {} of rank {}", dtype_name(w.dtype), w.shape.size());
  return std::make_unique<DenseLinear>(w, bias, compute);
}

}  // namespace qt
