// fp32 GEMM microkernel for AVX-512 (F+BW+VL+DQ): an MR×NR tile of y in zmm registers,
// NR/16 vector loads of the packed panel and MR embedded broadcasts of x per k.
// Zen 4 / Skylake-X both retire one 512-bit FMA per cycle per port pair; MR×NV = 24
// independent accumulators hide the 4-cycle FMA latency with room to spare.
#include <immintrin.h>

#include <cstring>

#include "libquant/kernels/gemm.h"
#include "libquant/kernels/gemm_avx512_tile.h"

#define QT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

namespace qt::kernels {
namespace {

constexpr int MR = 8;
constexpr int NV = 3;  // zmm per row
constexpr int NR = NV * 16;
// K slice: no slicing for typical K. Measured on Zen 4: a KC×NR slice that fits L1 (KC ≲ 96)
// costs more in reloads of the C tile than it saves; the panel streams from L2 at full speed.
constexpr int KC = 4096;

template <int R>
QT_AVX512 void tile_r(int cols, int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                      bool first, const float* bias) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) bv[j] = _mm512_load_ps(b + k * NR + 16 * j);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      __m512 av = _mm512_set1_ps(a[i * lda + k]);
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  store_tile<R, NV>(acc, cols, c, ldc, first, bias);
}

void tile(int rows, int cols, int64_t kc, const void* av, int64_t lda, const void* bv, float* c, int64_t ldc,
          bool first, const float* bias) {
  auto a = static_cast<const float*>(av);
  auto b = static_cast<const float*>(bv);
  with_tile_rows<MR>(rows, [&]<int R>() { tile_r<R>(cols, kc, a, lda, b, c, ldc, first, bias); });
}

void pack_panel(const float* w, int64_t K, int64_t n0, int cols, void* dst) {
  auto d = static_cast<float*>(dst);
  std::memset(d, 0, sizeof(float) * NR * size_t(K));
  for (int j = 0; j < cols; ++j) {
    const float* row = w + (n0 + j) * K;
    for (int64_t k = 0; k < K; ++k) d[k * NR + j] = row[k];
  }
}

const Family kFamily{
    "f32-avx512", MR, NR, 1, KC, 4, 4, false, pack_panel, nullptr, tile,
};

}  // namespace

const Family* family_f32_avx512() { return &kFamily; }

}  // namespace qt::kernels
