// bf16 GEMM microkernel on AVX512-BF16: VDPBF16PS multiplies 16 k-pairs of bf16 per zmm and
// adds both products into fp32 lanes. The panel holds, per k-pair, NR output features × 2
// interleaved bf16; x is a row-major bf16 copy whose 32-bit k-pairs are broadcast.
// Products of two bf16 are exact in fp32, so the result differs from the scalar reference only
// by the order of fp32 additions.
#include <immintrin.h>

#include <cstring>

#include "libquant/kernels/bf16.h"
#include "libquant/kernels/bf16_panel.h"
#include "libquant/kernels/gemm.h"
#include "libquant/kernels/gemm_avx512_tile.h"

#define QT_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
#define QT_PANEL_GEMV_TARGET QT_AVX512BF16
#include "libquant/kernels/panel_gemv.h"

namespace qt::kernels {
namespace {

constexpr int MR = 8;
constexpr int NV = 3;  // zmm per row
constexpr int NR = NV * 16;
constexpr int KC = 4096;  // k values per pass: no slicing for typical K (see the f32 kernel)

template <int R>
QT_AVX512BF16 void tile_r(int cols, int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* b, float* c,
                          int64_t ldc, bool first, const float* bias) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t kp = kc / 2;
  for (int64_t k = 0; k < kp; ++k) {
    __m512bh bv[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) bv[j] = (__m512bh)_mm512_load_si512(b + k * 2 * NR + 32 * j);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + i * lda + 2 * k, 4);
      __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
    }
  }
  store_tile<R, NV>(acc, cols, c, ldc, first, bias);
}

void tile(int rows, int cols, int64_t kc, const void* av, int64_t lda, const void* bv, float* c, int64_t ldc,
          bool first, const float* bias) {
  auto a = static_cast<const uint16_t*>(av);
  auto b = static_cast<const uint16_t*>(bv);
  with_tile_rows<MR>(rows, [&]<int R>() { tile_r<R>(cols, kc, a, lda, b, c, ldc, first, bias); });
}

// 32 values of a row at a time are rounded by VCVTNE2PS2BF16 (round_bf16's rule, bf16.h) into 16
// k-pairs, each stored as one dword of its k-pair's group: an 8B model's load was half this
// function when it rounded and stored one value at a time.
QT_AVX512BF16 void pack_panel(const float* w, int64_t K, int64_t n0, int cols, void* dst) {
  pack_bf16_panel<NR>(w, K, (K + 1) / 2 * 2, n0, cols, dst);
}

// Row-major bf16 copy of x, K padded to even with a zero (the panel is zero there too).
QT_AVX512BF16 void convert_rows(const float* x, int64_t rows, int64_t K, void* dst) {
  convert_bf16_rows(x, rows, K, (K + 1) / 2 * 2, dst);
}

const Family kFamily{
    "bf16-avx512", MR, NR, 2, KC, 2, 2, true, pack_panel, convert_rows, tile, panel_gemv_detail::gemv<NR, true>,
};

}  // namespace

const Family* family_bf16_avx512() { return &kFamily; }

}  // namespace qt::kernels
