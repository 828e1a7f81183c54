// AMX int8 GEMM (int8_amx.h): TDPBUSD of a 16-token × 64-byte A tile (codes + 128, unsigned) by a
// 16-quad × 16-row B tile of one weight panel (signed) into 16 × 16 int32 sums; a tile of work is
// up to 2 × 2 C tiles (32 tokens × 2 panels) per group. The epilogue is int8_vnni.cpp's, compiled
// without FMA contraction like it, so every float op rounds as there.
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

constexpr int kRows = 32;         // tokens per work tile: two A tiles
constexpr int kPanels = 2;        // weight panels per work tile: two B tiles
constexpr int kStepBytes = 1024;  // one A or B tile: 16 rows × 64 bytes, contiguous

// acc[r][q·16 + j] = Σ au[r, k] · w[p0 + q, j, k] over k-steps [t0, t1) of 64 bytes, RT A tiles and CT
// panels. a: the row block's steps, 1 KiB each (the second A tile's ks steps further on).
template <int RT, int CT>
void group_sums(const uint8_t* a, int64_t ks, const uint8_t* b0, const uint8_t* b1, int64_t t0, int64_t t1,
                int32_t* acc) {
  _tile_zero(0);
  if constexpr (CT > 1) _tile_zero(1);
  if constexpr (RT > 1) {
    _tile_zero(2);
    if constexpr (CT > 1) _tile_zero(3);
  }
  for (int64_t t = t0; t < t1; ++t) {
    _tile_loadd(6, b0 + t * kStepBytes, 64);
    if constexpr (CT > 1) _tile_loadd(7, b1 + t * kStepBytes, 64);
    _tile_loadd(4, a + t * kStepBytes, 64);
    _tile_dpbusd(0, 4, 6);
    if constexpr (CT > 1) _tile_dpbusd(1, 4, 7);
    if constexpr (RT > 1) {
      _tile_loadd(5, a + (ks + t) * kStepBytes, 64);
      _tile_dpbusd(2, 5, 6);
      if constexpr (CT > 1) _tile_dpbusd(3, 5, 7);
    }
  }
  constexpr int ldo = kPanels * 16 * 4;
  _tile_stored(0, acc, ldo);
  if constexpr (CT > 1) _tile_stored(1, acc + 16, ldo);
  if constexpr (RT > 1) {
    _tile_stored(2, acc + 16 * kPanels * 16, ldo);
    if constexpr (CT > 1) _tile_stored(3, acc + 16 * kPanels * 16 + 16, ldo);
  }
}

using GroupSums = void (*)(const uint8_t*, int64_t, const uint8_t*, const uint8_t*, int64_t, int64_t, int32_t*);
constexpr GroupSums kGroupSums[2][2] = {{group_sums<1, 1>, group_sums<1, 2>}, {group_sums<2, 1>, group_sums<2, 2>}};

// One work tile: tokens [t0, t0 + rows) × panels [p0, p0 + panels); a: the tokens' first row block
// in tile order. The group epilogue is int8_vnni.cpp's tile: sum_g = (g == 0 ? 0 : sum_{g-1}) +
// s_w · float(acc_g − 128·Σw), then y = s_x · sum.
QT_AMX_AVX512 void work_tile(const Int8Vnni& w, int64_t p0, int panels, const uint8_t* a, int rows, const float* sx,
                             float* y, int64_t ldy, __mmask16 last_mask) {
  amx_configure_thread();
  const int rt = rows > 16 ? 2 : 1;
  const auto* base = reinterpret_cast<const uint8_t*>(w.panels.data());
  const int64_t ks = w.k / 64, gs = w.gl / 64;              // tile steps of k, per group
  const uint8_t* b0 = base + size_t(p0 * ks * kStepBytes);  // a panel's k-quads are its tile steps
  const uint8_t* b1 = panels > 1 ? b0 + size_t(ks * kStepBytes) : b0;
  const GroupSums sums = kGroupSums[rt - 1][panels - 1];
  alignas(64) int32_t acc[kRows][kPanels * 16];
  alignas(64) float sum[kRows][kPanels * 16];
  for (int64_t g = 0; g < w.ng; ++g) {
    sums(a, ks, b0, b1, g * gs, (g + 1) * gs, &acc[0][0]);
    for (int q = 0; q < panels; ++q) {
      const size_t off = size_t(((p0 + q) * w.ng + g) * 16);
      const __m512i cs = _mm512_loadu_si512(w.colsum128.data() + off);
      const __m512 sw = _mm512_loadu_ps(w.scales.data() + off);
      for (int r = 0; r < rows; ++r) {
        const __m512 d =
            _mm512_mul_ps(sw, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(&acc[r][16 * q]), cs)));
        const __m512 prev = g == 0 ? _mm512_setzero_ps() : _mm512_load_ps(&sum[r][16 * q]);
        _mm512_store_ps(&sum[r][16 * q], _mm512_add_ps(prev, d));
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    const __m512 s = _mm512_set1_ps(sx[r]);
    for (int q = 0; q < panels; ++q)
      _mm512_mask_storeu_ps(y + r * ldy + (p0 + q) * 16, q == panels - 1 ? last_mask : __mmask16(0xFFFF),
                            _mm512_mul_ps(s, _mm512_load_ps(&sum[r][16 * q])));
  }
}

}  // namespace

void gemm_int8_amx_f32(const Int8Vnni& w, const float* x, int64_t m, float* y) {
  thread_local std::vector<uint8_t> au;
  thread_local std::vector<float> sx;
  au.resize(size_t(m * w.k));
  sx.resize(size_t(m));
  uint8_t* aq = au.data();
  float* sp = sx.data();
#pragma omp parallel for schedule(static) if (m * w.k > (1 << 15))
  for (int64_t t = 0; t < m; ++t) quantize_token_u8_vnni(x + t * w.k, w.k, aq + t * w.k, sp + t);
  gemm_u8_amx(w, aq, sp, m, y);
}

void gemm_u8_amx(const Int8Vnni& w, const uint8_t* ap, const float* sx, int64_t m, float* y) {
  // The activations in A tile order, [row block of 16][k-step][16 rows][64 bytes], rows past m zero:
  // each tile load reads 1 KiB in a row, as the panels' B tiles do, rather than 16 rows k bytes
  // apart, and a short last block needs no copy.
  thread_local AlignedBuffer blocked;
  const int64_t ks = w.k / 64, blocks = (m + 15) / 16;
  auto* ab = static_cast<uint8_t*>(blocked.reserve(size_t(blocks * ks * kStepBytes)));
  const bool par = m * w.n * w.k > (1 << 18);
#pragma omp parallel for schedule(static) if (par)
  for (int64_t b = 0; b < blocks; ++b)
    for (int r = 0; r < 16; ++r) {
      const int64_t row = b * 16 + r;
      uint8_t* dst = ab + size_t(b * ks * kStepBytes + r * 64);
      for (int64_t t = 0; t < ks; ++t, dst += kStepBytes) {
        if (row < m)
          std::memcpy(dst, ap + row * w.k + t * 64, 64);
        else
          std::memset(dst, 0, 64);
      }
    }
  // Work items of mb row blocks (32 tokens each) × nb panel pairs, the pairs inner: a row block's
  // activations are reused from L1/L2 by the item's pairs, and the pairs' weights (≤ 1 MiB, in L2)
  // by its row blocks. Each tile loads 4 KiB per 4 tile products, so the weights and tokens must come
  // from a core's own caches: with one pair per item every weight byte was read for 128 tokens only.
  const int64_t row_blocks = (m + kRows - 1) / kRows, pairs = (w.n_panels + kPanels - 1) / kPanels;
  const int64_t nb = std::clamp<int64_t>((int64_t(1) << 20) / (kPanels * 16 * w.k), 1, 8);
  const int64_t n_chunks = (pairs + nb - 1) / nb;
  const int64_t threads = par ? omp_get_max_threads() : 1;
  int64_t mb = row_blocks;  // as many tokens per item as keep 2 items a thread
  while (mb > 1 && n_chunks * ((row_blocks + mb - 1) / mb) < 2 * threads) mb = (mb + 1) / 2;
  const int64_t m_chunks = (row_blocks + mb - 1) / mb, items = m_chunks * n_chunks;
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t nc = it / m_chunks, mc = it % m_chunks;
    for (int64_t rb = mc * mb; rb < std::min(row_blocks, (mc + 1) * mb); ++rb) {
      const int64_t t0 = rb * kRows;
      const int rows = int(std::min<int64_t>(kRows, m - t0));
      for (int64_t pp = nc * nb; pp < std::min(pairs, (nc + 1) * nb); ++pp) {
        const int64_t p0 = pp * kPanels;
        const int panels = int(std::min<int64_t>(kPanels, w.n_panels - p0));
        const int cols = int(std::min<int64_t>(16, w.n - (p0 + panels - 1) * 16));
        work_tile(w, p0, panels, ab + size_t(t0 / 16 * ks * kStepBytes), rows, sx + t0, y + t0 * w.n, w.n,
                  __mmask16((1u << cols) - 1));
      }
    }
  }
}

}  // namespace qt::kernels
