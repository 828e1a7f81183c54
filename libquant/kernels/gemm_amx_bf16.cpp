// bf16 GEMM microkernel on AMX: TDPBF16PS multiplies a 16-row × 32-bf16 A tile by a 16-k-pair ×
// 16-feature B tile into 16 × 16 fp32 sums. A tile is up to 2 × 2 C tiles (32 token rows × 32
// output features) over a K slice.
//
// The panel is the bf16 AVX-512 layout at NR = 32: per k-pair, 32 output features × 2 interleaved
// bf16, so a B tile is 16 consecutive k-pairs of 16 features, read with a 128-byte stride. K is
// padded to 32 (one A tile row) with zeros in both operands.
//
// Each C element is the fp32 sum, in k order, of exact bf16 × bf16 products (Intel SDM vol. 2,
// TDPBF16PS: two fp32 adds per k-pair, round to nearest even, denormal inputs and outputs
// flushed to zero), so it is within the same γ_K·Σ|x·w| bound of the scalar reference
// (gemm_ref_bf16) as the AVX-512 kernel; the two kernels are not bit-equal.
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "libquant/kernels/amx_tile.h"
#include "libquant/kernels/bf16.h"
#include "libquant/kernels/bf16_panel.h"
#include "libquant/kernels/gemm.h"
#include "libquant/kernels/gemm_avx512_tile.h"

#define QT_AMX_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
#define QT_PANEL_GEMV_TARGET QT_AMX_AVX512BF16
#include "libquant/kernels/panel_gemv.h"

namespace qt::kernels {
namespace {

constexpr int MR = 32;        // two A tiles
constexpr int NR = 32;        // two B tiles
constexpr int KG = 32;        // bf16 per A tile row
constexpr int KC = 4096;      // as the AVX-512 kernel: no slicing for typical K
constexpr int kLdb = NR * 4;  // bytes between a B tile's rows (one k-pair of the panel)

// C tiles 0..3 = rows r·16, features q·16 at tile 2r + q, summed over kc (a multiple of 32).
template <int RT, int CT>
void dot_tiles(const uint16_t* a, int64_t lda_bytes, const uint16_t* b, int64_t kc, float* out) {
  _tile_zero(0);
  if constexpr (CT > 1) _tile_zero(1);
  if constexpr (RT > 1) {
    _tile_zero(2);
    if constexpr (CT > 1) _tile_zero(3);
  }
  const char* ab = reinterpret_cast<const char*>(a);
  const char* bb = reinterpret_cast<const char*>(b);
  for (int64_t k = 0; k < kc; k += KG) {
    const char* bk = bb + k / 2 * kLdb;
    _tile_loadd(6, bk, kLdb);
    if constexpr (CT > 1) _tile_loadd(7, bk + 64, kLdb);
    _tile_loadd(4, ab + 2 * k, lda_bytes);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (CT > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (RT > 1) {
      _tile_loadd(5, ab + 16 * lda_bytes + 2 * k, lda_bytes);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (CT > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  constexpr int ldo = NR * 4;
  _tile_stored(0, out, ldo);
  if constexpr (CT > 1) _tile_stored(1, out + 16, ldo);
  if constexpr (RT > 1) {
    _tile_stored(2, out + 16 * NR, ldo);
    if constexpr (CT > 1) _tile_stored(3, out + 16 * NR + 16, ldo);
  }
}

// store_tile's rule (gemm_avx512_tile.h) over the sums in out[rows][NR].
QT_AMX_AVX512BF16 void store(const float* out, int rows, int cols, float* c, int64_t ldc, bool first,
                             const float* bias) {
  const int nv = (cols + 15) / 16;
  for (int j = 0; j < nv; ++j) {
    const __mmask16 mk = tile_col_mask(cols, j);
    const __m512 bb = bias ? _mm512_maskz_loadu_ps(mk, bias + 16 * j) : _mm512_setzero_ps();
    for (int i = 0; i < rows; ++i) {
      float* p = c + i * ldc + 16 * j;
      const __m512 old = first ? bb : _mm512_maskz_loadu_ps(mk, p);
      _mm512_mask_storeu_ps(p, mk, _mm512_add_ps(_mm512_load_ps(out + i * NR + 16 * j), old));
    }
  }
}

void tile(int rows, int cols, int64_t kc, const void* av, int64_t lda, const void* bv, float* c, int64_t ldc,
          bool first, const float* bias) {
  amx_configure_thread();
  auto a = static_cast<const uint16_t*>(av);
  auto b = static_cast<const uint16_t*>(bv);
  const int rt = rows > 16 ? 2 : 1;
  int64_t lda_bytes = lda * 2;
  if (rows != 16 * rt) {
    // An A tile reads 16 rows: a short row block is copied where the rows past it can be read.
    // Those rows' sums are computed and dropped.
    thread_local std::vector<uint16_t> rows_copy;
    rows_copy.resize(size_t(MR) * size_t(kc));
    for (int i = 0; i < rows; ++i) std::memcpy(rows_copy.data() + i * kc, a + i * lda, size_t(kc) * 2);
    a = rows_copy.data();
    lda_bytes = kc * 2;
  }
  alignas(64) float out[MR * NR];
  __asm__ volatile("" ::: "memory");  // the tile loads' asm names no memory operand: the copy lands first
  if (rt == 1)
    cols > 16 ? dot_tiles<1, 2>(a, lda_bytes, b, kc, out) : dot_tiles<1, 1>(a, lda_bytes, b, kc, out);
  else
    cols > 16 ? dot_tiles<2, 2>(a, lda_bytes, b, kc, out) : dot_tiles<2, 1>(a, lda_bytes, b, kc, out);
  store(out, rows, cols, c, ldc, first, bias);
}

int64_t k_pad(int64_t K) { return (K + KG - 1) / KG * KG; }

// The AVX-512 bf16 kernel's packing at NR = 32 and K padded to 32.
QT_AMX_AVX512BF16 void pack_panel(const float* w, int64_t K, int64_t n0, int cols, void* dst) {
  pack_bf16_panel<NR>(w, K, k_pad(K), n0, cols, dst);
}

// Row-major bf16 copy of x, K padded to 32 with zeros.
QT_AMX_AVX512BF16 void convert_rows(const float* x, int64_t rows, int64_t K, void* dst) {
  convert_bf16_rows(x, rows, K, k_pad(K), dst);
}

const Family kFamily{
    "bf16-amx", MR, NR, KG, KC, 2, 2, true, pack_panel, convert_rows, tile, panel_gemv_detail::gemv<NR, true>,
};

}  // namespace

const Family* family_bf16_amx() { return &kFamily; }

}  // namespace qt::kernels
