// affine_i8.h: packing, the scalar spec, and the driver over the ISA tiles (affine_i8_vnni.cpp,
// affine_i8_avx2.cpp). Compiled without FMA contraction: the spec's only fused steps are its
// explicit std::fma calls, which the tiles' FMA instructions match bit for bit.
#pragma GCC optimize("fp-contract=off")
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "libquant/cpu_features.h"
#include "libquant/kernels/affine_i8.h"

namespace qt::kernels {

namespace {

const i8::Isa* isa() {
  const KernelLevel lvl = kernel_level();
  if (lvl >= KernelLevel::AVX512 && cpu_features().avx512_vnni) return &i8::isa_vnni();
  if (lvl >= KernelLevel::AVX2) return &i8::isa_avx2();
  return nullptr;
}

// Code of row `row`, column c from the packed panels.
int packed_code(const AffineI8& w, int64_t row, int64_t c) {
  const int64_t p = row / 16, r = row % 16, o = c / 8, j = c % 8;
  const uint8_t byte = w.panels[size_t((p * (w.k / 8) + o) * 64 + r * 4 + j % 4)];
  return j < 4 ? byte & 15 : byte >> 4;
}

}  // namespace

bool affine_i8_supports(int bits, int64_t k, int64_t g) { return bits == 4 && g > 0 && g % 8 == 0 && k % g == 0; }

AffineI8 pack_affine_i8(const uint8_t* codes, const float* scales, const float* biases, int64_t n, int64_t k,
                        int64_t g) {
  AffineI8 w;
  w.n = n;
  w.k = k;
  w.g = g;
  w.ng = k / g;
  w.n_panels = (n + 15) / 16;
  w.panels.resize(size_t(w.n_panels * (k / 8) * 64));
  w.scales.assign(size_t(w.n_panels * w.ng * 16), 0.0f);
  w.biases.assign(size_t(w.n_panels * w.ng * 16), 0.0f);
  const int64_t row_bytes = k / 2;
  // Every byte written (rows past n as zero codes), panels in parallel front to back: the fresh
  // pages of a large model fault in on every thread.
#pragma omp parallel for schedule(static) if (n * k > (1 << 20))
  for (int64_t p = 0; p < w.n_panels; ++p) {
    uint8_t* dst = w.panels.data() + size_t(p * (k / 8) * 64);
    for (int64_t o = 0; o < k / 8; ++o, dst += 64)
      for (int r = 0; r < 16; ++r) {
        const int64_t row = p * 16 + r;
        if (row >= n) {
          std::memset(dst + r * 4, 0, 4);
          continue;
        }
        const uint8_t* src = codes + row * row_bytes + o * 4;  // codes 8o..8o+7: bytes 4o..4o+3
        const int c[8] = {src[0] & 15, src[0] >> 4, src[1] & 15, src[1] >> 4,
                          src[2] & 15, src[2] >> 4, src[3] & 15, src[3] >> 4};
        for (int j = 0; j < 4; ++j) dst[r * 4 + j] = uint8_t(c[j] | c[j + 4] << 4);
      }
    for (int r = 0; r < 16 && p * 16 + r < n; ++r)
      for (int64_t gi = 0; gi < w.ng; ++gi) {
        w.scales[size_t((p * w.ng + gi) * 16 + r)] = scales[(p * 16 + r) * w.ng + gi];
        w.biases[size_t((p * w.ng + gi) * 16 + r)] = biases[(p * 16 + r) * w.ng + gi];
      }
  }
  return w;
}

void quantize_token_i8_ref(const float* x, int64_t k, int64_t g, bool per_token, int8_t* q, float* d, float* bx) {
  float tok_amax = 0.0f;
  if (per_token)
    for (int64_t j = 0; j < k; ++j) tok_amax = std::max(tok_amax, std::abs(x[j]));
  for (int64_t g0 = 0, gi = 0; g0 < k; g0 += g, ++gi) {
    float amax = tok_amax;
    if (!per_token)
      for (int64_t j = g0; j < g0 + g; ++j) amax = std::max(amax, std::abs(x[j]));
    float s = amax / 127.0f;
    if (s == 0.0f) s = 1.0f;  // a zero group: codes 0, any step
    const float inv = 1.0f / s;
    int32_t sum = 0;
    for (int64_t j = g0; j < g0 + g; ++j) {
      const float v = std::nearbyint(x[j] * inv);  // round to nearest even, as VCVTPS2DQ
      q[j] = int8_t(std::min(std::max(v, -127.0f), 127.0f));
      sum += q[j];
    }
    d[gi] = s;
    bx[gi] = s * float(sum);
  }
}

void quantize_token_i8(const float* x, int64_t k, int64_t g, bool per_token, int8_t* q, float* d, float* bx) {
  const i8::Isa* is = isa();
  if (is) return is->quantize(x, k, g, per_token, q, d, bx);
  quantize_token_i8_ref(x, k, g, per_token, q, d, bx);
}

void affine_i8_gemm_ref(const uint8_t* codes, const float* scales, const float* biases, int64_t n, int64_t k, int64_t g,
                        const int8_t* q, const float* d, const float* bx, int64_t m, const float* bias, float* y) {
  const int64_t ng = k / g;
#pragma omp parallel for schedule(dynamic, 16) if (m * n * k > (1 << 18))
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = codes + r * (k / 2);
    for (int64_t t = 0; t < m; ++t) {
      float sum = 0.0f;
      for (int64_t gi = 0; gi < ng; ++gi) {
        int32_t acc = 0;
        for (int64_t j = gi * g; j < (gi + 1) * g; ++j) {
          const int code = (j & 1) ? row[j / 2] >> 4 : row[j / 2] & 15;
          acc += code * int32_t(q[t * k + j]);
        }
        sum = std::fma(biases[r * ng + gi], bx[t * ng + gi], sum);
        sum = std::fma(float(acc), scales[r * ng + gi] * d[t * ng + gi], sum);
      }
      y[t * n + r] = bias ? sum + bias[r] : sum;
    }
  }
}

namespace {

// The spec over the packed codes: the scalar kernel level's GEMM.
void gemm_scalar(const AffineI8& w, const int8_t* q, const float* d, const float* bx, int64_t m, const float* bias,
                 float* y) {
#pragma omp parallel for schedule(dynamic, 16) if (m * w.n * w.k > (1 << 18))
  for (int64_t r = 0; r < w.n; ++r) {
    const int64_t p = r / 16, lane = r % 16;
    for (int64_t t = 0; t < m; ++t) {
      float sum = 0.0f;
      for (int64_t gi = 0; gi < w.ng; ++gi) {
        int32_t acc = 0;
        for (int64_t j = gi * w.g; j < (gi + 1) * w.g; ++j) acc += packed_code(w, r, j) * int32_t(q[t * w.k + j]);
        const size_t sb = size_t((p * w.ng + gi) * 16 + lane);
        sum = std::fma(w.biases[sb], bx[t * w.ng + gi], sum);
        sum = std::fma(float(acc), w.scales[sb] * d[t * w.ng + gi], sum);
      }
      y[t * w.n + r] = bias ? sum + bias[r] : sum;
    }
  }
}

// One tile: `rows` token rows from q/d/bx/y (each at the tile's first token) against `panels`
// panels from p0.
void run_tile(const i8::Isa& is, const AffineI8& w, int64_t p0, int panels, int rows, const int8_t* q, const float* d,
              const float* bx, const float* bias, float* y) {
  i8::TileArgs ta{&w,          p0,  q,
                  d,           bx,  bias ? bias + p0 * 16 : nullptr,
                  y + p0 * 16, w.n, int(std::min<int64_t>(16, w.n - (p0 + panels - 1) * 16))};
  is.tile(ta, rows, panels);
}

}  // namespace

void affine_i8_gemm(const AffineI8& w, const float* x, int64_t m, bool per_token, const float* bias, float* y) {
  const i8::Isa* is = isa();
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xd, xb;
  const bool amx = is && m >= 16 && kernel_level() >= KernelLevel::AMX && i8::amx_supports(w);
  xq.resize(size_t(m * w.k));
  xd.resize(size_t(m * w.ng));
  xb.resize(size_t(m * w.ng));
  int8_t* q = xq.data();
  float *d = xd.data(), *bx = xb.data();
#pragma omp parallel for schedule(static) if (m * w.k > (1 << 15))
  for (int64_t t = 0; t < m; ++t)
    quantize_token_i8(x + t * w.k, w.k, w.g, per_token, q + t * w.k, d + t * w.ng, bx + t * w.ng);
  if (!is) return gemm_scalar(w, q, d, bx, m, bias, y);
  if (amx) return i8::gemm_amx(w, q, d, bx, m, bias, y);

  // Row blocks innermost: a tile's panels (np · 16 rows of k/2 bytes) stay in L2 while the token
  // rows pass.
  const int64_t row_blocks = (m + is->mr - 1) / is->mr, col_blocks = (w.n_panels + is->np - 1) / is->np;
#pragma omp parallel for schedule(dynamic, 4) if (m * w.n * w.k > (1 << 18))
  for (int64_t i = 0; i < col_blocks * row_blocks; ++i) {
    const int64_t p0 = i / row_blocks * is->np, t0 = i % row_blocks * is->mr;
    const int panels = int(std::min<int64_t>(is->np, w.n_panels - p0));
    run_tile(*is, w, p0, panels, int(std::min<int64_t>(is->mr, m - t0)), q + t0 * w.k, d + t0 * w.ng, bx + t0 * w.ng,
             bias, y + t0 * w.n);
  }
}

bool affine_i8_slices_supported() { return isa() != nullptr; }

void affine_i8_gemv_panels(const AffineI8& w, const float* x, bool per_token, int64_t p0, int64_t p1, const float* bias,
                           float* y) {
  const i8::Isa* is = isa();
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, bx;
  q.resize(size_t(w.k));
  d.resize(size_t(w.ng));
  bx.resize(size_t(w.ng));
  quantize_token_i8(x, w.k, w.g, per_token, q.data(), d.data(), bx.data());
  for (int64_t p = p0; p < p1; p += is->np) {
    const int panels = int(std::min<int64_t>(is->np, p1 - p));
    run_tile(*is, w, p, panels, 1, q.data(), d.data(), bx.data(), bias, y);
  }
}

}  // namespace qt::kernels
