// AMX int8 GEMM (int8_amx.h): TDPBUSD of a 16-token × 64-byte A tile (codes + 128, unsigned) by a
// 16-quad × 16-row B tile of one weight panel (signed) into 16 × 16 int32 sums; a block of work is
// up to 2 × 2 C tiles (32 tokens × 2 panels), the fewest tile loads per product that 8 tiles allow
// (one). On the Xeon these loads, not the products, set the rate: 2 × 2 blocks on operands already
// in L1 run at about 60% of TDPBUSD's peak, so the loop hides each load under the products that do
// not need it and prefetches the operands two k-steps ahead. The epilogue is int8_vnni.cpp's,
// compiled without FMA contraction like it, so every float op rounds as there.
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "libquant/kernels/aligned_buffer.h"
#include "libquant/kernels/amx_tile.h"
#include "libquant/kernels/int8_amx.h"

#define QT_AMX_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace qt::kernels {

namespace {

constexpr int kRows = 32;         // tokens per block: two A tiles
constexpr int kPanels = 2;        // weight panels per block: two B tiles
constexpr int kStepBytes = 1024;  // one A or B tile: 16 rows × 64 bytes, contiguous
constexpr int kBlockInts = kRows * kPanels * 16;
constexpr int64_t kPrefetchSteps = 2;            // how far ahead in k the operands are prefetched into L1
constexpr int64_t kItemWeightBytes = 512 << 10;  // panel pairs of one work item: its weights, in L2
constexpr int kItemsPerThread = 2;               // work items a thread at least (row pairs split for it)

// The 16 lines of one tile into L1 (a prefetch past the end of a buffer is harmless: it never faults).
inline void prefetch_tile(const uint8_t* p) {
  for (int l = 0; l < 16; ++l) _mm_prefetch(reinterpret_cast<const char*>(p + l * 64), _MM_HINT_T0);
}

// c[r][q·16 + j] = Σ au[r, k] · w[panel q, j, k] over `steps` k-steps of 64 bytes, RT A tiles and CT
// panels: a = the first A tile's steps (the second's `a_next` bytes further), b0/b1 the panels'.
// Software-pipelined: each operand tile is refilled for step t + 1 right after the last product of
// step t that reads it, so the load runs under the products still queued; the four tiles of step
// t + 1 + kPrefetchSteps are prefetched into L1 meanwhile (the panels and tokens stream from L2).
template <int RT, int CT>
void block_sums(const uint8_t* a, int64_t a_next, const uint8_t* b0, const uint8_t* b1, int64_t steps, int32_t* c) {
  constexpr int ldc = kPanels * 16 * 4;
  _tile_zero(0);
  if constexpr (CT > 1) _tile_zero(1);
  if constexpr (RT > 1) {
    _tile_zero(2);
    if constexpr (CT > 1) _tile_zero(3);
  }
  const uint8_t* a1 = a + a_next;
  _tile_loadd(4, a, 64);
  _tile_loadd(6, b0, 64);
  if constexpr (CT > 1) _tile_loadd(7, b1, 64);
  if constexpr (RT > 1) _tile_loadd(5, a1, 64);
  for (int64_t t = 0; t + 1 < steps; ++t) {
    const int64_t o = (t + 1) * kStepBytes, ahead = o + kPrefetchSteps * kStepBytes;
    prefetch_tile(b0 + ahead);
    if constexpr (CT > 1) prefetch_tile(b1 + ahead);
    prefetch_tile(a + ahead);
    if constexpr (RT > 1) prefetch_tile(a1 + ahead);
    _tile_dpbusd(0, 4, 6);
    if constexpr (CT > 1) _tile_dpbusd(1, 4, 7);
    _tile_loadd(4, a + o, 64);
    if constexpr (RT > 1) {
      _tile_dpbusd(2, 5, 6);
      _tile_loadd(6, b0 + o, 64);
      if constexpr (CT > 1) {
        _tile_dpbusd(3, 5, 7);
        _tile_loadd(7, b1 + o, 64);
      }
      _tile_loadd(5, a1 + o, 64);
    } else {
      _tile_loadd(6, b0 + o, 64);
      if constexpr (CT > 1) _tile_loadd(7, b1 + o, 64);
    }
  }
  _tile_dpbusd(0, 4, 6);
  if constexpr (CT > 1) _tile_dpbusd(1, 4, 7);
  if constexpr (RT > 1) {
    _tile_dpbusd(2, 5, 6);
    if constexpr (CT > 1) _tile_dpbusd(3, 5, 7);
  }
  _tile_stored(0, c, ldc);
  if constexpr (CT > 1) _tile_stored(1, c + 16, ldc);
  if constexpr (RT > 1) {
    _tile_stored(2, c + 16 * kPanels * 16, ldc);
    if constexpr (CT > 1) _tile_stored(3, c + 16 * kPanels * 16 + 16, ldc);
  }
}

using BlockSums = void (*)(const uint8_t*, int64_t, const uint8_t*, const uint8_t*, int64_t, int32_t*);
constexpr BlockSums kBlockSums[2][2] = {{block_sums<1, 1>, block_sums<1, 2>}, {block_sums<2, 1>, block_sums<2, 2>}};

// One block's group g: d = s_w · float(acc − 128·Σw); s = (g == 0 ? 0 : sum) + d, int8_vnni.cpp's
// order; the last group writes y = s_x · s, the others keep s in sum.
QT_AMX_AVX512 void epilogue(const Int8Vnni& w, int64_t p0, int panels, int64_t g, const int32_t* acc, float* sum,
                            int rows, const float* sx, float* y, int64_t ldy, __mmask16 last_mask) {
  const bool last = g == w.ng - 1;
  for (int q = 0; q < panels; ++q) {
    const size_t off = size_t(((p0 + q) * w.ng + g) * 16);
    const __m512i cs = _mm512_loadu_si512(w.colsum128.data() + off);
    const __m512 sw = _mm512_loadu_ps(w.scales.data() + off);
    const __mmask16 mask = q == panels - 1 ? last_mask : __mmask16(0xFFFF);
    for (int r = 0; r < rows; ++r) {
      const int i = r * kPanels * 16 + 16 * q;
      const __m512 d =
          _mm512_mul_ps(sw, _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_sub_epi32(_mm512_load_si512(acc + i), cs)));
      const __m512 s = _mm512_add_ps(g == 0 ? _mm512_setzero_ps() : _mm512_load_ps(sum + i), d);
      if (last)
        _mm512_mask_storeu_ps(y + r * ldy + (p0 + q) * 16, mask, _mm512_mul_ps(_mm512_set1_ps(sx[r]), s));
      else
        _mm512_store_ps(sum + i, s);
    }
  }
}

// A work item: row pairs [r0, r1) (32 tokens each) × panel pairs [q0, q1) of one weight.
struct Item {
  const Int8Vnni* w;
  float* y;
  int64_t r0, r1, q0, q1;
};

// The item's blocks, the panel pairs inner: a row pair's tokens (2 · k bytes) are reused from L2 by
// the item's panel pairs, and the item's weights by its row pairs. ab: every token's codes in A tile
// order (quantize_blocked), sx their scales.
QT_AMX_AVX512 void run_item(const Item& it, const uint8_t* ab, const float* sx, int64_t m) {
  amx_configure_thread();
  const Int8Vnni& w = *it.w;
  const auto* base = reinterpret_cast<const uint8_t*>(w.panels.data());
  const int64_t ks = w.k / 64, gs = w.gl / 64;  // tile steps of k, per group
  alignas(64) int32_t acc[kBlockInts];
  alignas(64) float sum[kBlockInts];
  for (int64_t rp = it.r0; rp < it.r1; ++rp) {
    const int64_t row0 = rp * kRows;
    const int rows = int(std::min<int64_t>(kRows, m - row0));
    const uint8_t* a = ab + size_t(row0 / 16 * ks * kStepBytes);
    for (int64_t pp = it.q0; pp < it.q1; ++pp) {
      const int64_t p0 = pp * kPanels;
      const int panels = int(std::min<int64_t>(kPanels, w.n_panels - p0));
      const uint8_t* b0 = base + size_t(p0 * ks * kStepBytes);
      const uint8_t* b1 = panels > 1 ? b0 + size_t(ks * kStepBytes) : b0;
      const int cols = int(std::min<int64_t>(16, w.n - (p0 + panels - 1) * 16));
      const BlockSums sums = kBlockSums[rows > 16 ? 1 : 0][panels - 1];
      for (int64_t g = 0; g < w.ng; ++g) {
        const size_t o = size_t(g * gs * kStepBytes);
        sums(a + o, ks * kStepBytes, b0 + o, b1 + o, gs, acc);
        epilogue(w, p0, panels, g, acc, sum, rows, sx + row0, it.y + row0 * w.n, w.n, __mmask16((1u << cols) - 1));
      }
    }
  }
}

// The tokens quantized (quantize_token_u8_vnni) straight into A tile order, [row block of 16][k-step]
// [16 rows][64 bytes], rows past m zero: each tile load then reads 1 KiB in a row, as the panels' B
// tiles do, and a short last block needs no copy.
void quantize_blocked(const float* x, int64_t m, int64_t k, uint8_t* ab, float* sx, bool par) {
  const int64_t ks = k / 64, padded = (m + 15) / 16 * 16;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t t = 0; t < padded; ++t) {
    thread_local std::vector<uint8_t> row;
    row.resize(size_t(k));
    if (t < m)
      quantize_token_u8_vnni(x + t * k, k, row.data(), sx + t);
    else
      std::fill(row.begin(), row.end(), uint8_t(0));
    uint8_t* dst = ab + size_t((t / 16 * ks) * kStepBytes + (t % 16) * 64);
    for (int64_t s = 0; s < ks; ++s) std::memcpy(dst + s * kStepBytes, row.data() + s * 64, 64);
  }
}

void gemm_shared(const Int8Vnni* const* ws, int count, const float* x, int64_t m, float* const* ys) {
  const int64_t k = ws[0]->k;
  int64_t macs = 0;
  for (int i = 0; i < count; ++i) macs += m * ws[i]->n * k;
  const bool par = macs > (1 << 18);
  thread_local AlignedBuffer blocked;
  thread_local std::vector<float> scales;
  auto* ab = static_cast<uint8_t*>(blocked.reserve(size_t((m + 15) / 16 * 16 * k)));
  scales.resize(size_t(m));
  quantize_blocked(x, m, k, ab, scales.data(), par || m * k > (1 << 15));
  // Work items of mb row pairs × nb panel pairs of one weight, the panel pairs inner: the item's
  // weights (about kItemWeightBytes, in L2) are read from memory once and reused by all its tokens.
  // Row pairs are split only as far as needed to give each thread kItemsPerThread items; an item's
  // neighbours in the list share its weights, so threads that take them at once share them in L3.
  const int64_t row_pairs = (m + kRows - 1) / kRows;
  const int64_t nb = std::clamp<int64_t>(kItemWeightBytes / (kPanels * 16 * k), 1, 64);
  int64_t n_chunks = 0;
  for (int i = 0; i < count; ++i) n_chunks += ((ws[i]->n_panels + kPanels - 1) / kPanels + nb - 1) / nb;
  const int64_t threads = par ? omp_get_max_threads() : 1;
  int64_t mb = row_pairs;
  while (mb > 1 && n_chunks * ((row_pairs + mb - 1) / mb) < kItemsPerThread * threads) mb = (mb + 1) / 2;
  const int64_t m_chunks = (row_pairs + mb - 1) / mb;
  std::vector<Item> items;
  items.reserve(size_t(n_chunks * m_chunks));
  for (int i = 0; i < count; ++i) {
    const int64_t pairs = (ws[i]->n_panels + kPanels - 1) / kPanels;
    for (int64_t q = 0; q < pairs; q += nb)
      for (int64_t r = 0; r < row_pairs; r += mb)
        items.push_back({ws[i], ys[i], r, std::min(row_pairs, r + mb), q, std::min(pairs, q + nb)});
  }
  const float* sp = scales.data();
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (size_t i = 0; i < items.size(); ++i) run_item(items[i], ab, sp, m);
}

}  // namespace

void gemm_int8_amx_f32(const Int8Vnni& w, const float* x, int64_t m, float* y) {
  const Int8Vnni* ws[1] = {&w};
  float* ys[1] = {y};
  gemm_shared(ws, 1, x, m, ys);
}

void gemm_int8_amx_f32_shared(const Int8Vnni* const* ws, int count, const float* x, int64_t m, float* const* ys) {
  gemm_shared(ws, count, x, m, ys);
}

}  // namespace qt::kernels
