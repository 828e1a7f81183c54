// fp32 GEMM microkernel for AVX2+FMA: the classic 6×16 tile (12 ymm accumulators, 2 panel
// loads and 6 broadcasts per k), which fits the 16 ymm registers.
// Also the bf16 emulation for CPUs without AVX512-BF16: the panel stores bf16 (half the
// bytes), widened exactly to fp32 in registers; x is rounded to bf16 values per call.
#include <immintrin.h>

#include <cstring>

#include "libquant/kernels/bf16.h"
#include "libquant/kernels/gemm.h"

#define QT_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace qt::kernels {
namespace {

// The one-row tile (the decode step's GEMV, dense_linear.cpp) asks for the panel this far ahead:
// on the device machine's Xeon at the AVX2 level, 2 threads, SmolLM2 f32 decode 28-30 -> 34 tok/s
// (256-1024 bytes did nothing). The AVX-512 tile is left alone: the same hint made it slower there.
constexpr int64_t kPrefetchBytes = 2048;

constexpr int MR = 6;
constexpr int NV = 2;  // ymm per row
constexpr int NR = NV * 8;
constexpr int KC = 4096;  // no K slicing for typical K (see the AVX-512 kernel)

QT_AVX2 inline __m256i col_mask(int cols, int j) {
  int r = cols - 8 * j;
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), idx);
}

QT_AVX2 inline __m256 load_b(const float* b) { return _mm256_load_ps(b); }
QT_AVX2 inline __m256 load_b(const uint16_t* b) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(b)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

template <int R, typename BT>
QT_AVX2 void tile_r(int cols, int64_t kc, const float* a, int64_t lda, const BT* b, float* c, int64_t ldc, bool first,
                    const float* bias) {
  __m256 acc[R][NV];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    // One row (the decode step's GEMV) streams the panel once from memory with little to
    // overlap the loads: ask for the lines kPrefetchBytes ahead (prefetches never fault).
    if constexpr (R == 1)
      for (int j = 0; j < int(sizeof(*b)) * NR; j += 64)
        _mm_prefetch(reinterpret_cast<const char*>(b + k * NR) + kPrefetchBytes + j, _MM_HINT_T0);
    __m256 bv[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) bv[j] = load_b(b + k * NR + 8 * j);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      __m256 av = _mm256_broadcast_ss(a + i * lda + k);
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  __m256i mk[NV];
  __m256 bb[NV];
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) {
    mk[j] = col_mask(cols, j);
    bb[j] = bias ? _mm256_maskload_ps(bias + 8 * j, mk[j]) : _mm256_setzero_ps();
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
      float* p = c + i * ldc + 8 * j;
      __m256 old = first ? bb[j] : _mm256_maskload_ps(p, mk[j]);
      _mm256_maskstore_ps(p, mk[j], _mm256_add_ps(acc[i][j], old));
    }
}

template <typename BT>
void tile(int rows, int cols, int64_t kc, const void* av, int64_t lda, const void* bv, float* c, int64_t ldc,
          bool first, const float* bias) {
  auto a = static_cast<const float*>(av);
  auto b = static_cast<const BT*>(bv);
  switch (rows) {
    case 6: return tile_r<6>(cols, kc, a, lda, b, c, ldc, first, bias);
    case 5: return tile_r<5>(cols, kc, a, lda, b, c, ldc, first, bias);
    case 4: return tile_r<4>(cols, kc, a, lda, b, c, ldc, first, bias);
    case 3: return tile_r<3>(cols, kc, a, lda, b, c, ldc, first, bias);
    case 2: return tile_r<2>(cols, kc, a, lda, b, c, ldc, first, bias);
    case 1: return tile_r<1>(cols, kc, a, lda, b, c, ldc, first, bias);
  }
}

void pack_panel_f32(const float* w, int64_t K, int64_t n0, int cols, void* dst) {
  auto d = static_cast<float*>(dst);
  std::memset(d, 0, sizeof(float) * NR * size_t(K));
  for (int j = 0; j < cols; ++j)
    for (int64_t k = 0; k < K; ++k) d[k * NR + j] = w[(n0 + j) * K + k];
}

void pack_panel_bf16(const float* w, int64_t K, int64_t n0, int cols, void* dst) {
  auto d = static_cast<uint16_t*>(dst);
  std::memset(d, 0, sizeof(uint16_t) * NR * size_t(K));
  for (int j = 0; j < cols; ++j)
    for (int64_t k = 0; k < K; ++k) d[k * NR + j] = round_bf16(w[(n0 + j) * K + k]);
}

// x rounded to bf16 values, kept as fp32 so the tile can broadcast them directly.
void convert_rows_bf16(const float* x, int64_t rows, int64_t K, void* dst) {
  auto d = static_cast<float*>(dst);
  for (int64_t i = 0; i < rows * K; ++i) d[i] = bf16_round_value(x[i]);
}

const Family kF32{
    "f32-avx2", MR, NR, 1, KC, 4, 4, false, pack_panel_f32, nullptr, tile<float>,
};
const Family kBF16{
    "bf16-avx2", MR, NR, 1, KC, 2, 4, true, pack_panel_bf16, convert_rows_bf16, tile<uint16_t>,
};

}  // namespace

const Family* family_f32_avx2() { return &kF32; }
const Family* family_bf16_avx2() { return &kBF16; }

}  // namespace qt::kernels
