// affine_i16_gemm.h: the driver. Tokens rounded once, then tasks of one group of kNP panels
// (decoded once into the thread's L2) against a slice of the tokens, tiled by the ISA's kernel
// (affine_i16_vnni.cpp: VPDPWSSD; affine_i16_avx2.cpp: VPMADDWD).
#include "libquant/kernels/affine_i16_gemm.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "libquant/cpu_features.h"
#include "libquant/kernels/affine_i16_detail.h"
#include "libquant/kernels/aligned_buffer.h"
#include "libquant/parallel.h"

namespace qt::kernels {

using i16::kNP;

namespace {

const i16::Isa* isa() {
  const KernelLevel lvl = kernel_level();
  if (lvl >= KernelLevel::AVX512 && cpu_features().avx512_vnni) return &i16::isa_vnni();
  if (lvl >= KernelLevel::AVX2) return &i16::isa_avx2();
  return nullptr;
}

// Panels [p0, p0 + np) of rows of codes (see affine_i16_detail.h); rows past n are zero. Plain
// loops: a task decodes 64 rows once for all its tokens, a few percent of the tile work.
void decode_panels(int bits, const uint8_t* codes, const float* scales, const float* biases, int64_t n, int64_t k,
                   int64_t g, int64_t p0, int np, int32_t* pan, float* st, float* bt) {
  const int64_t k2 = k / 2, groups = k / g, row_bytes = k * bits / 8;
  for (int p = 0; p < np; ++p)
    for (int r = 0; r < 16; ++r) {
      const int64_t row = (p0 + p) * 16 + r;
      int32_t* dst = pan + int64_t(p) * k2 * 16 + r;
      const bool real = row < n;
      // Centred codes q − c (c = 2^(bits−1)) against the bias b + c·s: the same weights, but the
      // token's rounding error r now meets s·(q − c) instead of s·q — about half the size for codes
      // spread evenly over their range, less for bell-shaped groups — while c·s·Σx comes from the
      // fp32 group sum X.
      const int c = 1 << (bits - 1);
      for (int64_t gi = 0; gi < groups; ++gi) {
        const float sc = real ? scales[row * groups + gi] : 0.0f;
        st[(p * groups + gi) * 16 + r] = sc;
        bt[(p * groups + gi) * 16 + r] = real ? biases[row * groups + gi] + float(c) * sc : 0.0f;
      }
      const uint8_t* src = codes + row * row_bytes;
      auto pair = [c](int lo, int hi) {
        return int32_t(uint16_t(int16_t(lo - c))) | int32_t(uint32_t(uint16_t(int16_t(hi - c))) << 16);
      };
      if (!real)
        for (int64_t i = 0; i < k2; ++i) dst[i * 16] = 0;
      else if (bits == 4)  // byte i holds q_2i (low nibble) and q_2i+1 (high)
        for (int64_t i = 0; i < k2; ++i) dst[i * 16] = pair(src[i] & 15, src[i] >> 4);
      else
        for (int64_t i = 0; i < k2; ++i) dst[i * 16] = pair(src[2 * i], src[2 * i + 1]);
    }
}

}  // namespace

bool affine_i16_gemm_supported(int bits, int64_t k, int64_t g) {
  return isa() && (bits == 4 || bits == 8) && g > 0 && g % 32 == 0 && g <= 128 && k % g == 0;
}

void affine_i16_gemm(int bits, const uint8_t* codes, const float* scales, const float* biases, int64_t n, int64_t k,
                     int64_t g, const float* x, int64_t m, const float* bias, float* y) {
  const i16::Isa& is = *isa();
  const int64_t groups = k / g;
  thread_local std::vector<int16_t> xq;
  thread_local std::vector<float> xd, xs;
  xq.resize(size_t(m * k));
  xd.resize(size_t(m * groups));
  xs.resize(size_t(m * groups));
  int16_t* q = xq.data();
  float *d = xd.data(), *s = xs.data();
#pragma omp parallel for schedule(static) if (m * k > (1 << 15))
  for (int64_t t = 0; t < m; ++t) is.round_token(x + t * k, k, g, q + t * k, d + t * groups, s + t * groups);

  // Slices of the tokens only where the panel groups alone are too few for the threads (SmolLM2's
  // k/v projections are three groups); each slice decodes its panels again.
  const int64_t n_panels = (n + 15) / 16, pgroups = (n_panels + kNP - 1) / kNP;
  const int64_t row_blocks = (m + is.mr - 1) / is.mr;
  const int64_t want = 4 * int64_t(num_threads());
  const int64_t slices = std::clamp<int64_t>((want + pgroups - 1) / pgroups, 1, std::max<int64_t>(1, row_blocks / 8));
  const int64_t blocks_per_slice = (row_blocks + slices - 1) / slices;
#pragma omp parallel for schedule(dynamic, 1) if (m * n * k > (1 << 18))
  for (int64_t task = 0; task < pgroups * slices; ++task) {
    const int64_t pg = task / slices, sl = task % slices;
    const int64_t b0 = sl * blocks_per_slice, b1 = std::min(row_blocks, b0 + blocks_per_slice);
    if (b0 >= b1) continue;  // the rounding up of blocks_per_slice can leave the last slices empty
    const int64_t p0 = pg * kNP;
    const int np = int(std::min<int64_t>(kNP, n_panels - p0));
    thread_local AlignedBuffer pan_buf, st_buf, bt_buf;
    int32_t* pan = static_cast<int32_t*>(pan_buf.reserve(size_t(np) * size_t(k) / 2 * 16 * 4));
    float* st = static_cast<float*>(st_buf.reserve(size_t(np) * size_t(groups) * 16 * 4));
    float* bt = static_cast<float*>(bt_buf.reserve(size_t(np) * size_t(groups) * 16 * 4));
    decode_panels(bits, codes, scales, biases, n, k, g, p0, np, pan, st, bt);
    i16::TileArgs ta{pan,     st,      bt,
                     k,       g,       nullptr,
                     nullptr, nullptr, bias ? bias + p0 * 16 : nullptr,
                     nullptr, n,       int(std::min<int64_t>(16, n - (p0 + np - 1) * 16))};
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t t0 = b * is.mr;
      ta.a = q + t0 * k;
      ta.d = d + t0 * groups;
      ta.xs = s + t0 * groups;
      ta.y = y + t0 * n + p0 * 16;
      is.tile(ta, int(std::min<int64_t>(is.mr, m - t0)), np);
    }
  }
}

}  // namespace qt::kernels
