// The decoded-row drivers (decoded_rows.h): panels through the dense tiles, or row dot products.
#include "libquant/linear/decoded_rows.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "libquant/kernels/aligned_buffer.h"
#include "libquant/kernels/hsum_avx2.h"

namespace qt {
namespace {

// Packed panels a task decodes at once, and the activations of one row chunk: both stay in L2.
constexpr size_t kPanelGroupBytes = 512 << 10;
constexpr size_t kRowChunkBytes = 512 << 10;

__attribute__((target("avx512f,fma"))) float dot_avx512(const float* a, const float* b, int64_t k) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i + 16 <= k; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  for (; i < k; ++i) s += a[i] * b[i];
  return s;
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t k) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= k; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = kernels::hsum8(_mm256_add_ps(acc0, acc1));
  for (; i < k; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t k, KernelLevel level) {
  if (level >= KernelLevel::AVX512) return dot_avx512(a, b, k);
  if (level == KernelLevel::AVX2) return dot_avx2(a, b, k);
  float acc = 0.0f;
  for (int64_t i = 0; i < k; ++i) acc += a[i] * b[i];
  return acc;
}

void decoded_row_dots(int64_t n, int64_t k, const RowDecoder& decode, const float* x, int64_t m, const float* bias,
                      float* y, int64_t r0, int64_t r1, bool threads, KernelLevel level) {
#pragma omp parallel if (threads && (r1 - r0) * k > (1 << 16))
  {
    thread_local std::vector<float> row;
    row.resize(size_t(k));
#pragma omp for schedule(dynamic, 32)
    for (int64_t r = r0; r < r1; ++r) {
      decode(r, row.data());
      for (int64_t t = 0; t < m; ++t) y[t * n + r] = dot_f32(x + t * k, row.data(), k, level) + (bias ? bias[r] : 0.0f);
    }
  }
}

void decoded_panel_gemm(const kernels::Family& f, int64_t n, int64_t k, const RowDecoder& decode, const float* x,
                        int64_t m, const float* bias, float* y) {
  const int64_t kp = f.k_padded(k);
  const void* a = x;
  int64_t lda = k;
  thread_local kernels::AlignedBuffer conv;
  if (f.convert_a) {
    a = conv.reserve(size_t(m) * size_t(kp) * size_t(f.a_bytes));
    f.convert_rows(x, m, k, const_cast<void*>(a));
    lda = kp;
  }
  // A task decodes and packs a group of panels once (in L2 beside a row chunk's activations), then
  // runs them over the rows a row chunk at a time (the dense driver's order inside: K slices, then
  // the row blocks, so every y value is summed as dense_linear sums it).
  const int64_t panels = (n + f.nr - 1) / f.nr;
  const size_t pbytes = f.panel_bytes(k);
  const int64_t per_task = std::max<int64_t>(
      1, std::min<int64_t>(int64_t(kPanelGroupBytes / pbytes), panels / (int64_t(omp_get_max_threads()) * 4)));
  const int64_t tasks = (panels + per_task - 1) / per_task;
  const int64_t mc = std::max<int64_t>(1, int64_t(kRowChunkBytes / size_t(kp * f.a_bytes)) / f.mr) * f.mr;
#pragma omp parallel
  {
    thread_local kernels::AlignedBuffer rows_buf, panel_buf;
    float* rows = static_cast<float*>(rows_buf.reserve(size_t(f.nr) * size_t(k) * 4));
    char* group = static_cast<char*>(panel_buf.reserve(pbytes * size_t(per_task)));
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t p0 = t * per_task, p1 = std::min(panels, p0 + per_task);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t n0 = p * f.nr;
        const int cols = int(std::min<int64_t>(f.nr, n - n0));
        for (int c = 0; c < cols; ++c) decode(n0 + c, rows + int64_t(c) * k);
        f.pack_panel(rows, k, 0, cols, group + size_t(p - p0) * pbytes);  // decoded rows 0..cols of `rows`
      }
      for (int64_t r0 = 0; r0 < m; r0 += mc) {
        const int64_t r1 = std::min(m, r0 + mc);
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t n0 = p * f.nr;
          const int cols = int(std::min<int64_t>(f.nr, n - n0));
          const char* panel = group + size_t(p - p0) * pbytes;
          for (int64_t k0 = 0; k0 < kp; k0 += f.kc) {
            const int64_t kc = std::min<int64_t>(f.kc, kp - k0);
            const char* b = panel + size_t(k0) * size_t(f.nr) * size_t(f.b_bytes);
            for (int64_t m0 = r0; m0 < r1; m0 += f.mr) {
              const int r = int(std::min<int64_t>(f.mr, r1 - m0));
              const char* ap = static_cast<const char*>(a) + size_t(m0 * lda + k0) * size_t(f.a_bytes);
              f.tile(r, cols, kc, ap, lda, b, y + m0 * n + n0, n, k0 == 0, bias ? bias + n0 : nullptr);
            }
          }
        }
      }
    }
  }
}

}  // namespace qt
