// affine_i8.h on AMX-INT8: TDPBSSD of 16 token rows × 64 bytes of x̃ (signed) by a B tile of one
// weight panel's codes as bytes (0..15, 16 k-quads × 16 output rows) into 16 × 16 int32 sums per
// 64-wide step of k, a group being g / 64 steps; then the VNNI tile's float epilogue per group in
// the same order (affine_i8.h), so the bits are affine_i8_gemm_ref's. The panels keep their nibble
// layout (AffineI8): octet o's 64 bytes hold, in their low nibbles, the B tile row of k-quad 2o and,
// in their high nibbles, that of quad 2o + 1, so one group's two panels are unpacked into 2 KiB per
// step once and serve every token row block of the work item. llama.cpp runs its Q4_0 / Q4_1 the
// same way on AMX (ggml-cpu/amx/mmq.cpp: TDPBSSD per block, the scales applied per block).
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "libquant/kernels/affine_i8.h"
#include "libquant/kernels/aligned_buffer.h"
#include "libquant/kernels/amx_tile.h"

#define QT_AMX_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

namespace qt::kernels::i8 {

namespace {

constexpr int kRows = 32;           // tokens per block: two A tiles
constexpr int kPanels = 2;          // weight panels per block: two B tiles
constexpr int kTile = 1024;         // one B tile: 16 quads × 64 bytes
constexpr int64_t kItemRows = 128;  // tokens per work item (its blocks reuse the unpacked panels)

// Panels p0, p0 + 1 (one if `panels` is 1) over steps [s0, s0 + steps) unpacked to B tiles:
// bt[(step · 2 + q) · 1 KiB], row 2o the low nibbles of octet o, row 2o + 1 the high ones.
QT_AMX_AVX512 void unpack(const AffineI8& w, int64_t p0, int panels, int64_t s0, int64_t steps, uint8_t* bt) {
  const __m512i lo4 = _mm512_set1_epi8(0x0f);
  const int64_t k8 = w.k / 8;
  for (int64_t s = 0; s < steps; ++s)
    for (int q = 0; q < panels; ++q) {
      const uint8_t* src = w.panels.data() + size_t(((p0 + q) * k8 + (s0 + s) * 8) * 64);
      uint8_t* dst = bt + size_t((s * kPanels + q) * kTile);
      for (int o = 0; o < 8; ++o) {
        const __m512i raw = _mm512_loadu_si512(src + o * 64);
        _mm512_store_si512(dst + (2 * o) * 64, _mm512_and_si512(raw, lo4));
        _mm512_store_si512(dst + (2 * o + 1) * 64, _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4));
      }
    }
}

// Tiles 0..3 (c[r][q·16 + j]) = Σ x̃[r, k] · code[panel q, j, k] over `steps` steps: a the first A
// tile's step 0 in tile order (1 KiB a step; the second A tile a_next bytes on), bt the unpacked B
// tiles. The sums stay in the tiles until store(): the core runs the previous block's epilogue
// while the tile unit works on these products.
template <int RT, int CT>
void issue(const int8_t* a, int64_t a_next, const uint8_t* bt, int64_t steps) {
  _tile_zero(0);
  if constexpr (CT > 1) _tile_zero(1);
  if constexpr (RT > 1) {
    _tile_zero(2);
    if constexpr (CT > 1) _tile_zero(3);
  }
  for (int64_t s = 0; s < steps; ++s) {
    const uint8_t* b = bt + size_t(s * kPanels * kTile);
    _tile_loadd(4, a + s * kTile, 64);
    _tile_loadd(6, b, 64);
    if constexpr (CT > 1) _tile_loadd(7, b + kTile, 64);
    _tile_dpbssd(0, 4, 6);
    if constexpr (CT > 1) _tile_dpbssd(1, 4, 7);
    if constexpr (RT > 1) {
      _tile_loadd(5, a + a_next + s * kTile, 64);
      _tile_dpbssd(2, 5, 6);
      if constexpr (CT > 1) _tile_dpbssd(3, 5, 7);
    }
  }
}

template <int RT, int CT>
void store(int32_t* c) {
  constexpr int ldc = kPanels * 16 * 4;
  _tile_stored(0, c, ldc);
  if constexpr (CT > 1) _tile_stored(1, c + 16, ldc);
  if constexpr (RT > 1) {
    _tile_stored(2, c + 16 * kPanels * 16, ldc);
    if constexpr (CT > 1) _tile_stored(3, c + 16 * kPanels * 16 + 16, ldc);
  }
}

using Issue = void (*)(const int8_t*, int64_t, const uint8_t*, int64_t);
using Store = void (*)(int32_t*);
constexpr Issue kIssue[2][2] = {{issue<1, 1>, issue<1, 2>}, {issue<2, 1>, issue<2, 2>}};
constexpr Store kStore[2][2] = {{store<1, 1>, store<1, 2>}, {store<2, 1>, store<2, 2>}};

// Group gi of a block: sum = fma(b, bx, sum); sum = fma(float(acc), s·d, sum) (affine_i8.h's order;
// sum starts at 0 with the first group).
template <int CT>
QT_AMX_AVX512 void epilogue(const AffineI8& w, int64_t p0, int64_t gi, const int32_t* acc, float* sum, int rows,
                            const float* d, const float* bx) {
  const int64_t ng = w.ng;
  __m512 sv[CT], bv[CT];
  for (int q = 0; q < CT; ++q) {
    const size_t off = size_t(((p0 + q) * ng + gi) * 16);
    sv[q] = _mm512_loadu_ps(w.scales.data() + off), bv[q] = _mm512_loadu_ps(w.biases.data() + off);
  }
  const float *dp = d + gi, *bp = bx + gi;
  for (int r = 0; r < rows; ++r, dp += ng, bp += ng, acc += kPanels * 16, sum += kPanels * 16) {
    const __m512 dr = _mm512_set1_ps(*dp), bxr = _mm512_set1_ps(*bp);
#pragma GCC unroll 2
    for (int q = 0; q < CT; ++q) {
      const __m512 prev = gi == 0 ? _mm512_setzero_ps() : _mm512_load_ps(sum + 16 * q);
      const __m512 s = _mm512_fmadd_ps(bv[q], bxr, prev);
      _mm512_store_ps(sum + 16 * q, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(acc + 16 * q)),
                                                    _mm512_mul_ps(sv[q], dr), s));
    }
  }
}

// Tokens [t0, t1) against panels p0, p0 + 1: group by group, the group's B tiles unpacked once,
// then every block of 32 tokens; the sums of all the item's tokens kept until the last group.
QT_AMX_AVX512 void run_item(const AffineI8& w, int64_t p0, int64_t t0, int64_t t1, const int8_t* ab, const float* d,
                            const float* bx, const float* bias, float* y) {
  amx_configure_thread();
  const int panels = int(std::min<int64_t>(kPanels, w.n_panels - p0));
  const int cols = int(std::min<int64_t>(16, w.n - (p0 + panels - 1) * 16));
  const int64_t gs = w.g / 64;
  thread_local AlignedBuffer bt_buf, sum_buf;
  auto* bt = static_cast<uint8_t*>(bt_buf.reserve(size_t(gs * kPanels * kTile)));
  auto* sum = static_cast<float*>(sum_buf.reserve(size_t(kItemRows * kPanels * 16) * sizeof(float)));
  // One block's sums: the epilogue reads them before the next block's store() (program order), while
  // that block's products run.
  alignas(64) int32_t acc[kRows * kPanels * 16];
  const int64_t ks = w.k / 64;  // A tile steps a 16-row block
  for (int64_t gi = 0; gi < w.ng; ++gi) {
    unpack(w, p0, panels, gi * gs, gs, bt);
    int64_t prev = -1;  // the block whose sums wait in acc for their epilogue
    int prev_rows = 0;
    auto finish = [&] {
      (panels > 1 ? epilogue<2> : epilogue<1>)(w, p0, gi, acc, sum + (prev - t0) * kPanels * 16, prev_rows,
                                               d + prev * w.ng, bx + prev * w.ng);
    };
    for (int64_t r0 = t0; r0 < t1; r0 += kRows) {
      const int rows = int(std::min<int64_t>(kRows, t1 - r0)), rt = rows > 16 ? 1 : 0;
      kIssue[rt][panels - 1](ab + (r0 / 16 * ks + gi * gs) * kTile, ks * kTile, bt, gs);
      if (prev >= 0) finish();
      kStore[rt][panels - 1](acc);
      prev = r0, prev_rows = rows;
    }
    finish();
  }
  const __mmask16 last = __mmask16((1u << cols) - 1);
  for (int64_t t = t0; t < t1; ++t)
    for (int qq = 0; qq < panels; ++qq) {
      const __mmask16 mask = qq == panels - 1 ? last : __mmask16(0xFFFF);
      __m512 v = _mm512_load_ps(sum + ((t - t0) * kPanels + qq) * 16);
      const int64_t col = (p0 + qq) * 16;
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias + col));
      _mm512_mask_storeu_ps(y + t * w.n + col, mask, v);
    }
}

}  // namespace

bool amx_supports(const AffineI8& w) { return w.g % 64 == 0; }

// q: the tokens' x̃ [m, k], copied first into A tile order ([16-row block][64-byte step][16 rows]
// [64 bytes], rows past m zero): each A tile load then reads 1 KiB in a row.
void gemm_amx(const AffineI8& w, const int8_t* q, const float* d, const float* bx, int64_t m, const float* bias,
              float* y) {
  const int64_t ks = w.k / 64, blocks = (m + 15) / 16;
  const bool par = m * w.n * w.k > (1 << 18);
  thread_local AlignedBuffer blocked;
  auto* ab = static_cast<int8_t*>(blocked.reserve(size_t(blocks * 16 * w.k)));
#pragma omp parallel for schedule(static) if (par)
  for (int64_t t = 0; t < blocks * 16; ++t) {
    int8_t* dst = ab + (t / 16 * ks * kTile + t % 16 * 64);
    for (int64_t s = 0; s < ks; ++s)
      if (t < m)
        std::memcpy(dst + s * kTile, q + t * w.k + s * 64, 64);
      else
        std::memset(dst + s * kTile, 0, 64);
  }
  const int64_t pairs = (w.n_panels + kPanels - 1) / kPanels, row_items = (m + kItemRows - 1) / kItemRows;
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t i = 0; i < pairs * row_items; ++i) {
    const int64_t pp = i / row_items, t0 = i % row_items * kItemRows;
    run_item(w, pp * kPanels, t0, std::min(m, t0 + kItemRows), ab, d, bx, bias, y);
  }
}

}  // namespace qt::kernels::i8
