// Nearest-codeword search (vq_search.h): every codeword's fp32 score, tiled so that a tile of
// codewords stays in L1 while every row passes over it. No contraction: the score is a multiply
// and an add per dim on every kernel level.
#pragma GCC optimize("fp-contract=off")
#include "libquant/kv/vq_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qt::kv {

namespace {

// Nearest codeword of one row among k (centroid-major ct[i·k + c], ‖c‖² in cn); the AVX2 and
// baseline clones give the same floats (multiply and add stay separate).
__attribute__((target_clones("avx2", "default"))) int nearest_codeword(const float* m2, const float* ct,
                                                                       const float* cn, int k, int d, float* dist) {
  for (int c = 0; c < k; ++c) dist[c] = cn[c];
  for (int i = 0; i < d; ++i) {
    const float xi = m2[i];
    const float* row = ct + size_t(i) * k;
    for (int c = 0; c < k; ++c) dist[c] += xi * row[c];
  }
  int best = 0;
  for (int c = 1; c < k; ++c)
    if (dist[c] < dist[best]) best = c;
  return best;
}

// The nearest codeword (ties to the lowest index) of n residual rows (n a multiple of kRows)
// among k (a multiple of 16): dist = ‖c‖² + Σ_i m2_i·c_i, the same sums in the same order as
// nearest_codeword. The codebook is tiled 16 codewords at a time (ctile[(c0/16)·d·16 + i·16 + j]
// = c_{c0+j}[i]: one 4 KiB run at d = 64), and each tile is held in L1 while every row block
// passes over it — kRows rows × 16 codewords of sums in registers as the dims stream by. Per row
// and lane the smallest distance so far and its codeword persist in bd/bi between tiles (a strict
// < keeps the lower index of a tie, as tiles are visited in increasing order); the lanes are
// merged at the end.
constexpr int kRows = 6;
typedef float v8 __attribute__((vector_size(32)));
typedef int v8i __attribute__((vector_size(32)));

__attribute__((target_clones("avx2", "default"))) void nearest_rows(const float* m2, int n, int d, const float* ctile,
                                                                    const float* cn, int k, float* bd, int* bi,
                                                                    int* best) {
  for (int j = 0; j < 16 * n; ++j) bd[j] = INFINITY, bi[j] = 0;
  for (int c0 = 0; c0 < k; c0 += 16) {
    const float* tile = ctile + size_t(c0) * d;
    v8 n0, n1;
    __builtin_memcpy(&n0, cn + c0, 32);
    __builtin_memcpy(&n1, cn + c0 + 8, 32);
    const v8i i0 = {c0, c0 + 1, c0 + 2, c0 + 3, c0 + 4, c0 + 5, c0 + 6, c0 + 7}, i1 = i0 + 8;
    for (int t0 = 0; t0 < n; t0 += kRows) {
      v8 a[kRows][2];
      for (int t = 0; t < kRows; ++t) a[t][0] = n0, a[t][1] = n1;
      const float* x0 = m2 + size_t(t0) * d;
      for (int i = 0; i < d; ++i) {
        v8 w0, w1;
        __builtin_memcpy(&w0, tile + size_t(i) * 16, 32);
        __builtin_memcpy(&w1, tile + size_t(i) * 16 + 8, 32);
        for (int t = 0; t < kRows; ++t) {
          const float x = x0[size_t(t) * d + i];
          const v8 xv = {x, x, x, x, x, x, x, x};
          a[t][0] += xv * w0;
          a[t][1] += xv * w1;
        }
      }
      for (int t = 0; t < kRows; ++t) {  // bd/bi: 16 floats / ints per row, unaligned
        float* bp = bd + 16 * size_t(t0 + t);
        int* xp = bi + 16 * size_t(t0 + t);
        v8 b0, b1;
        v8i x0v, x1v;
        __builtin_memcpy(&b0, bp, 32), __builtin_memcpy(&b1, bp + 8, 32);
        __builtin_memcpy(&x0v, xp, 32), __builtin_memcpy(&x1v, xp + 8, 32);
        const v8i m0 = a[t][0] < b0, m1 = a[t][1] < b1;
        b0 = m0 ? a[t][0] : b0, x0v = m0 ? i0 : x0v;
        b1 = m1 ? a[t][1] : b1, x1v = m1 ? i1 : x1v;
        __builtin_memcpy(bp, &b0, 32), __builtin_memcpy(bp + 8, &b1, 32);
        __builtin_memcpy(xp, &x0v, 32), __builtin_memcpy(xp + 8, &x1v, 32);
      }
    }
  }
  for (int t = 0; t < n; ++t) {  // the smallest distance, ties to the lowest index
    float bv = INFINITY;
    int b = 0;
    for (int j = 0; j < 16; ++j) {
      const float v = bd[16 * size_t(t) + j];
      const int i = bi[16 * size_t(t) + j];
      if (v < bv || (v == bv && i < b)) bv = v, b = i;
    }
    best[t] = b;
  }
}

}  // namespace

NearestCodeword::NearestCodeword(const float* C, int k, int d) : C_(C), k_(k), d_(d) {}

// ‖c‖² and the search's layout, made on the first search: a codec built only to check a
// configuration (eval-ppl does so before loading the model) never pays for them.
void NearestCodeword::prepare() const {
  cn_.resize(size_t(k_));
  (k_ % 16 == 0 ? ctile_ : ct_).resize(size_t(k_) * d_);
  for (int c = 0; c < k_; ++c) {
    float a = 0;  // in increasing i, multiply then add
    for (int i = 0; i < d_; ++i) {
      const float x = C_[size_t(c) * d_ + i];
      if (k_ % 16 != 0)
        ct_[size_t(i) * k_ + c] = x;
      else
        ctile_[size_t(c / 16 * 16) * d_ + size_t(i) * 16 + c % 16] = x;
      a += x * x;
    }
    cn_[size_t(c)] = a;
  }
}

void NearestCodeword::search(const float* m2, int n, int* best) const {
  std::call_once(prepared_, [this] { prepare(); });
  if (k_ % 16 != 0) {
    thread_local std::vector<float> dist;
    dist.resize(size_t(k_));
    for (int t = 0; t < n; ++t)
      best[t] = nearest_codeword(m2 + size_t(t) * d_, ct_.data(), cn_.data(), k_, d_, dist.data());
    return;
  }
  // Whole row blocks straight from m2; a last partial block through a copy padded with its first
  // row (the padding's results unused). Each row's result depends on that row alone.
  thread_local std::vector<float> pad, bd;
  thread_local std::vector<int> bi, out;
  const int nf = n / kRows * kRows, nr = n - nf;
  bd.resize(16 * size_t(std::max(nf, kRows))), bi.resize(bd.size());
  if (nf > 0) nearest_rows(m2, nf, d_, ctile_.data(), cn_.data(), k_, bd.data(), bi.data(), best);
  if (nr > 0) {
    pad.resize(size_t(kRows) * d_), out.resize(size_t(kRows));
    const float* tail = m2 + size_t(nf) * d_;
    std::memcpy(pad.data(), tail, sizeof(float) * size_t(nr) * d_);
    for (int t = nr; t < kRows; ++t) std::memcpy(pad.data() + size_t(t) * d_, tail, sizeof(float) * d_);
    nearest_rows(pad.data(), kRows, d_, ctile_.data(), cn_.data(), k_, bd.data(), bi.data(), out.data());
    std::copy(out.begin(), out.begin() + nr, best + nf);
  }
}

}  // namespace qt::kv
