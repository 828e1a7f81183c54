// Nearest-codeword search (vq_search.h): the exhaustive fp32 search that defines the codes, and
// the AVX2 integer prefilter that finds the same codes with a third of the arithmetic.
// No contraction anywhere: the exact score is a multiply and an add per dim on every path.
#pragma GCC optimize("fp-contract=off")
#include "libquant/kv/vq_search.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "libquant/cpu_features.h"

namespace qt::kv {

namespace {

// ---- the definition: every codeword in fp32 ------------------------------------------------------

// Nearest codeword of one row among k (centroid-major ct[i·k + c], ‖c‖² in cn); the AVX2 and
// baseline clones give the same floats (multiply and add stay separate).
__attribute__((target_clones("avx2", "default")))
int nearest_codeword(const float* m2, const float* ct, const float* cn, int k, int d, float* dist) {
  for (int c = 0; c < k; ++c) dist[c] = cn[c];
  for (int i = 0; i < d; ++i) {
    const float xi = m2[i];
    const float* row = ct + size_t(i) * k;
    for (int c = 0; c < k; ++c) dist[c] += xi * row[c];
  }
  int best = 0;
  for (int c = 1; c < k; ++c)
    if (dist[c] < dist[best]) best = c;
  return best;
}

// The nearest codeword (ties to the lowest index) of n residual rows (n a multiple of kRows)
// among k (a multiple of 16): dist = ‖c‖² + Σ_i m2_i·c_i, the same sums in the same order as
// nearest_codeword. The codebook is tiled 16 codewords at a time (ctile[(c0/16)·d·16 + i·16 + j]
// = c_{c0+j}[i]: one 4 KiB run at d = 64), and each tile is held in L1 while every row block
// passes over it — kRows rows × 16 codewords of sums in registers as the dims stream by. Per row
// and lane the smallest distance so far and its codeword persist in bd/bi between tiles (a strict
// < keeps the lower index of a tie, as tiles are visited in increasing order); the lanes are
// merged at the end.
constexpr int kRows = 6;
typedef float v8 __attribute__((vector_size(32)));
typedef int v8i __attribute__((vector_size(32)));

__attribute__((target_clones("avx2", "default")))
void nearest_rows(const float* m2, int n, int d, const float* ctile, const float* cn, int k, float* bd, int* bi, int* best) {
  for (int j = 0; j < 16 * n; ++j) bd[j] = INFINITY, bi[j] = 0;
  for (int c0 = 0; c0 < k; c0 += 16) {
    const float* tile = ctile + size_t(c0) * d;
    v8 n0, n1;
    __builtin_memcpy(&n0, cn + c0, 32);
    __builtin_memcpy(&n1, cn + c0 + 8, 32);
    const v8i i0 = {c0, c0 + 1, c0 + 2, c0 + 3, c0 + 4, c0 + 5, c0 + 6, c0 + 7}, i1 = i0 + 8;
    for (int t0 = 0; t0 < n; t0 += kRows) {
      v8 a[kRows][2];
      for (int t = 0; t < kRows; ++t) a[t][0] = n0, a[t][1] = n1;
      const float* x0 = m2 + size_t(t0) * d;
      for (int i = 0; i < d; ++i) {
        v8 w0, w1;
        __builtin_memcpy(&w0, tile + size_t(i) * 16, 32);
        __builtin_memcpy(&w1, tile + size_t(i) * 16 + 8, 32);
        for (int t = 0; t < kRows; ++t) {
          const float x = x0[size_t(t) * d + i];
          const v8 xv = {x, x, x, x, x, x, x, x};
          a[t][0] += xv * w0;
          a[t][1] += xv * w1;
        }
      }
      for (int t = 0; t < kRows; ++t) {  // bd/bi: 16 floats / ints per row, unaligned
        float* bp = bd + 16 * size_t(t0 + t);
        int* xp = bi + 16 * size_t(t0 + t);
        v8 b0, b1;
        v8i x0v, x1v;
        __builtin_memcpy(&b0, bp, 32), __builtin_memcpy(&b1, bp + 8, 32);
        __builtin_memcpy(&x0v, xp, 32), __builtin_memcpy(&x1v, xp + 8, 32);
        const v8i m0 = a[t][0] < b0, m1 = a[t][1] < b1;
        b0 = m0 ? a[t][0] : b0, x0v = m0 ? i0 : x0v;
        b1 = m1 ? a[t][1] : b1, x1v = m1 ? i1 : x1v;
        __builtin_memcpy(bp, &b0, 32), __builtin_memcpy(bp + 8, &b1, 32);
        __builtin_memcpy(xp, &x0v, 32), __builtin_memcpy(xp + 8, &x1v, 32);
      }
    }
  }
  for (int t = 0; t < n; ++t) {  // the smallest distance, ties to the lowest index
    float bv = INFINITY;
    int b = 0;
    for (int j = 0; j < 16; ++j) {
      const float v = bd[16 * size_t(t) + j];
      const int i = bi[16 * size_t(t) + j];
      if (v < bv || (v == bv && i < b)) bv = v, b = i;
    }
    best[t] = b;
  }
}

// One codeword's score exactly as the definition sums it (cn first, then dim by dim).
float exact_score(const float* m2, const float* c, float cn, int d) {
  float a = cn;
  for (int i = 0; i < d; ++i) a += m2[i] * c[i];
  return a;
}

// ---- the AVX2 integer prefilter -------------------------------------------------------------------

constexpr int kQ = 31;   // rows and codewords as integers in [−31, 31]; rows stored as u = q + 32
constexpr int kR = 4;    // rows per register block
constexpr float kRel = 1e-5f;  // relative inflation of every computed norm (float sums of ≤ 2¹⁰ terms)

#pragma GCC push_options
#pragma GCC target("avx2,fma")

// acc[t·k + c] = Σ_i u[t·d + i]·q(c, i) for t < np (a multiple of kR): q8 is [c/8][i/4][c%8][i%4],
// so one VPMADDUBSW gives 8 codewords × 4 dims of one row (its 4 bytes broadcast). Each int16
// lane sums 2 products per step; 8 steps (32 dims) stay below 2¹⁵ (16 · 63 · 31 = 31248), then
// VPMADDWD joins a codeword's two lanes into int32. kR rows × 16 codewords a pass: each broadcast
// row word feeds two multiplies.
void dots_u8s8(const uint8_t* u, int np, int d, const int8_t* q8, int k, int32_t* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int steps = d / 4;
  for (int t0 = 0; t0 < np; t0 += kR) {
    const uint8_t* ur = u + size_t(t0) * d;
    for (int g = 0; g < k / 8; g += 2) {
      const int8_t* tg0 = q8 + size_t(g) * 8 * d;
      const int8_t* tg1 = tg0 + size_t(8) * d;
      __m256i a32[kR][2];
      for (int r = 0; r < kR; ++r) a32[r][0] = a32[r][1] = _mm256_setzero_si256();
      for (int h = 0; h < steps; h += 8) {
        __m256i a16[kR][2];
        for (int r = 0; r < kR; ++r) a16[r][0] = a16[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int s = h; s < h + 8; ++s) {
          const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tg0 + size_t(s) * 32));
          const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tg1 + size_t(s) * 32));
          for (int r = 0; r < kR; ++r) {
            int32_t x;
            std::memcpy(&x, ur + size_t(r) * d + 4 * size_t(s), 4);
            const __m256i xb = _mm256_set1_epi32(x);
            a16[r][0] = _mm256_add_epi16(a16[r][0], _mm256_maddubs_epi16(xb, w0));
            a16[r][1] = _mm256_add_epi16(a16[r][1], _mm256_maddubs_epi16(xb, w1));
          }
        }
        for (int r = 0; r < kR; ++r)
          for (int j = 0; j < 2; ++j) a32[r][j] = _mm256_add_epi32(a32[r][j], _mm256_madd_epi16(a16[r][j], ones));
      }
      for (int r = 0; r < kR; ++r)
        for (int j = 0; j < 2; ++j)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + size_t(t0 + r) * k + 8 * size_t(g + j)), a32[r][j]);
    }
  }
}

float hmin8(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  m = _mm_min_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// x (d floats, d % 32 == 0) as integers u = q + 32, q ∈ [−31, 31], x ≈ s·q with s = max|x|/31;
// the float norms ‖x − s·q‖, ‖q‖ and ‖x‖ (each within 1e−5 relative of its float inputs; x − s·q
// is within 2u·|x_i| of the real difference). False for NaN, inf or values near float's range.
struct VecQuant {
  float s, e, q, x;
};
bool quantize_vec(const float* x0, int d, uint8_t* u, VecQuant* vq) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps(), vsm = _mm256_setzero_ps();
  for (int i = 0; i < d; i += 8) {
    const __m256 x = _mm256_loadu_ps(x0 + i);
    vmax = _mm256_max_ps(vmax, _mm256_and_ps(x, absmask));
    vsm = _mm256_add_ps(vsm, _mm256_mul_ps(x, x));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  const float amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1))), sm = hsum8(vsm);
  if (!(sm <= 1e36f)) return false;
  const float sr = amax / float(kQ);
  const __m256 inv = _mm256_set1_ps(amax > 0 ? float(kQ) / amax : 0.0f), vsr = _mm256_set1_ps(sr);
  const __m256 lo = _mm256_set1_ps(-float(kQ)), hi = _mm256_set1_ps(float(kQ)), off = _mm256_set1_ps(32.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256 vse = _mm256_setzero_ps(), vsq = _mm256_setzero_ps();
  for (int i = 0; i < d; i += 32) {
    __m256i qi[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 x = _mm256_loadu_ps(x0 + i + 8 * j);
      const __m256 q = _mm256_min_ps(_mm256_max_ps(_mm256_round_ps(_mm256_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), lo), hi);
      const __m256 e = _mm256_sub_ps(x, _mm256_mul_ps(vsr, q));
      vse = _mm256_add_ps(vse, _mm256_mul_ps(e, e));
      vsq = _mm256_add_ps(vsq, _mm256_mul_ps(q, q));
      qi[j] = _mm256_cvtps_epi32(_mm256_add_ps(q, off));  // 1..63
    }
    // int32 → bytes in order: packs interleave 128-bit lanes, the permute restores i order
    const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + i), _mm256_permutevar8x32_epi32(b, order));
  }
  vq->s = sr;
  vq->e = std::sqrt(hsum8(vse)) * (1 + kRel) + 1e-6f * std::sqrt(sm);
  vq->q = std::sqrt(hsum8(vsq)) * (1 + kRel);
  vq->x = std::sqrt(sm) * (1 + kRel);
  return true;
}

// A row's integer copy and the constants of its bound.
struct RowBound {
  float sr;  // row scale: m2 ≈ sr·q
  float a;   // bound per ‖c‖: ‖m2 − sr·q‖ + 2e−5·‖m2‖ (the exact and approximate sums' own rounding)
  float b;   // bound per ‖c − sc·qc‖: sr·‖q‖
  float m;   // ‖m2‖ rounded up (the fp32 dot products' rounding bound)
};
bool quantize_row(const float* m2, int d, uint8_t* u, RowBound* rb) {
  VecQuant v;
  if (!quantize_vec(m2, d, u, &v)) return false;
  rb->sr = v.s;
  rb->a = (v.e + 2e-5f * v.x) * (1 + kRel);
  rb->b = v.s * v.q * (1 + kRel);
  rb->m = v.x;
  return true;
}

// The prefilter's codebook tables; false if a codeword is not finite (the stage stays exhaustive).
bool quantize_codebook(const float* C, int k, int d, int8_t* q8, float* sc, float* nc, float* ne, int32_t* sq32) {
  std::vector<uint8_t> u(static_cast<size_t>(d));
  for (int c = 0; c < k; ++c) {
    VecQuant v;
    if (!quantize_vec(C + size_t(c) * d, d, u.data(), &v)) return false;
    int32_t sum = 0;
    for (int i = 0; i < d; ++i) {
      const int q = int(u[size_t(i)]) - 32;
      q8[((size_t(c / 8) * (d / 4) + i / 4) * 8 + c % 8) * 4 + i % 4] = int8_t(q);
      sum += q;
    }
    sc[c] = v.s, nc[c] = v.x, ne[c] = v.e, sq32[c] = 32 * sum;
  }
  return true;
}

// kCompress[mask] = the set lanes' indices, packed low (for a branchless left-pack of candidates).
struct CompressTable {
  alignas(32) int32_t idx[256][8];
  CompressTable() {
    for (int m = 0; m < 256; ++m) {
      int n = 0;
      for (int j = 0; j < 8; ++j)
        if (m >> j & 1) idx[m][n++] = j;
      for (; n < 8; ++n) idx[m][n] = 0;
    }
  }
};
const CompressTable kCompress;

// The prefiltered search over n rows (np = n rounded up to kR; u and acc sized for np).
void prefiltered(const float* m2, int n, int d, int k, const float* C, const float* cn, const int8_t* q8, const float* sc,
                 const float* nc, const float* ne, const int32_t* sq32, int* best, uint8_t* fallback, NearestCodeword::Stats* st) {
  const int np = (n + kR - 1) / kR * kR;
  thread_local std::vector<uint8_t> u;
  thread_local std::vector<int32_t> acc;
  thread_local std::vector<RowBound> rbs;
  thread_local std::vector<float> lb;
  thread_local std::vector<int> cand, cand2;
  u.assign(size_t(np) * d, 32);
  acc.resize(size_t(np) * k);
  rbs.resize(size_t(np));
  lb.resize(size_t(k) + 8);
  cand.resize(size_t(k) + 16), cand2.resize(size_t(k));
  for (int t = 0; t < n; ++t) fallback[t] = !quantize_row(m2 + size_t(t) * d, d, u.data() + size_t(t) * d, &rbs[size_t(t)]);
  dots_u8s8(u.data(), np, d, q8, k, acc.data());
  for (int t = 0; t < n; ++t) {
    if (fallback[t]) continue;
    const RowBound& rb = rbs[size_t(t)];
    const float* x = m2 + size_t(t) * d;
    const int32_t* at = acc.data() + size_t(t) * k;
    // approx(c) = ‖c‖² + sr·sc·(acc − 32·Σq); |approx − score| ≤ a·‖c‖ + b·‖e_c‖ + 2.1e−5·‖c‖²
    const __m256 vsr = _mm256_set1_ps(rb.sr), va = _mm256_set1_ps(rb.a), vb = _mm256_set1_ps(rb.b);
    const __m256 vk = _mm256_set1_ps(2.1e-5f);
    __m256 ubmin = _mm256_set1_ps(INFINITY);
    for (int c = 0; c < k; c += 8) {
      const __m256i iv = _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + c)),
                                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sq32 + c)));
      const __m256 vcn = _mm256_loadu_ps(cn + c);
      const __m256 ap = _mm256_fmadd_ps(_mm256_mul_ps(vsr, _mm256_loadu_ps(sc + c)), _mm256_cvtepi32_ps(iv), vcn);
      const __m256 e = _mm256_fmadd_ps(va, _mm256_loadu_ps(nc + c), _mm256_fmadd_ps(vb, _mm256_loadu_ps(ne + c), _mm256_mul_ps(vk, vcn)));
      _mm256_storeu_ps(lb.data() + c, _mm256_sub_ps(ap, e));
      ubmin = _mm256_min_ps(ubmin, _mm256_add_ps(ap, e));
    }
    const __m256 thr = _mm256_set1_ps(hmin8(ubmin));
    int nc1 = 0;
    for (int c = 0; c < k; c += 8) {  // cand gets 8 slots past nc1 (sized k + 8)
      const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(lb.data() + c), thr, _CMP_LE_OQ));
      const __m256i ix = _mm256_add_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(kCompress.idx[mask])), _mm256_set1_epi32(c));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(cand.data() + nc1), ix);
      nc1 += __builtin_popcount(unsigned(mask));
    }
    if (st) st->candidates += nc1;
    if (nc1 == 1) {
      best[t] = cand[0];
      continue;
    }
    if (nc1 == 0) {  // only NaN gets here
      fallback[t] = 1;
      continue;
    }
    // fp32 dots of 8 candidates at a time (one FMA chain each, then a transposing reduction);
    // |f − score| ≤ 1.2e−5·(‖c‖² + ‖m2‖·‖c‖) covers both sums' roundings. Lanes past nc1 get +inf.
    for (int j = nc1; j < (nc1 + 7) / 8 * 8; ++j) cand[size_t(j)] = cand[0];
    __m256 fmin = _mm256_set1_ps(INFINITY);
    for (int j0 = 0; j0 < nc1; j0 += 8) {
      const __m256i ix = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cand.data() + j0));
      const float* w[8];
      for (int j = 0; j < 8; ++j) w[j] = C + size_t(cand[size_t(j0 + j)]) * d;
      __m256 a[8];
      for (int j = 0; j < 8; ++j) a[j] = _mm256_setzero_ps();
      for (int i = 0; i < d; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w[j] + i), a[j]);
      }
      const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
      const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
      const __m256 dot = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
      const __m256 vcn = _mm256_i32gather_ps(cn, ix, 4), vnc = _mm256_i32gather_ps(nc, ix, 4);
      const __m256 f = _mm256_add_ps(vcn, dot);
      const __m256 dl = _mm256_mul_ps(_mm256_set1_ps(1.2e-5f), _mm256_fmadd_ps(_mm256_set1_ps(rb.m), vnc, vcn));
      const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nc1 - j0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
      const __m256 inf = _mm256_set1_ps(INFINITY);
      _mm256_storeu_ps(lb.data() + j0, _mm256_blendv_ps(inf, _mm256_sub_ps(f, dl), live));  // lb reused: per candidate
      fmin = _mm256_min_ps(fmin, _mm256_blendv_ps(inf, _mm256_add_ps(f, dl), live));
    }
    const float fmin_ub = hmin8(fmin);
    int nc2 = 0;
    for (int j = 0; j < nc1; ++j)
      if (lb[size_t(j)] <= fmin_ub) cand2[size_t(nc2++)] = cand[size_t(j)];
    if (nc2 == 1) {
      best[t] = cand2[0];
      continue;
    }
    if (st) ++st->exact_rows;
    int b = -1;  // candidates are in increasing index order: strict < keeps the lowest of a tie
    float bv = INFINITY;
    for (int j = 0; j < nc2; ++j) {
      const int c = cand2[size_t(j)];
      const float v = exact_score(x, C + size_t(c) * d, cn[c], d);
      if (b < 0 || v < bv) bv = v, b = c;
    }
    best[t] = b;
  }
}

#pragma GCC pop_options

}  // namespace

NearestCodeword::NearestCodeword(const float* C, int k, int d)
    : C_(C), k_(k), d_(d), prefilter_(k % 16 == 0 && d % 32 == 0) {}

// ‖c‖² and the prefilter's tables, made on the first search (a codec built only to check a
// configuration, as eval-ppl does before loading the model, never pays for them).
void NearestCodeword::prepare() const {
  cn_.resize(size_t(k_));
  for (int c = 0; c < k_; ++c) {
    float a = 0;  // in increasing i, multiply then add
    for (int i = 0; i < d_; ++i) a += C_[size_t(c) * d_ + i] * C_[size_t(c) * d_ + i];
    cn_[size_t(c)] = a;
  }
  if (!prefilter_ || max_kernel_level() < KernelLevel::AVX2) return;
  q8_.resize(size_t(k_) * d_);
  sc_.resize(size_t(k_)), nc_.resize(size_t(k_)), ne_.resize(size_t(k_)), sq32_.resize(size_t(k_));
  tables_ = quantize_codebook(C_, k_, d_, q8_.data(), sc_.data(), nc_.data(), ne_.data(), sq32_.data());
}

// The exhaustive search's layouts, made on first use (where the prefilter runs, only rows with
// non-finite values come here).
void NearestCodeword::make_exhaustive_layout() const {
  (k_ % 16 == 0 ? ctile_ : ct_).resize(size_t(k_) * d_);
  for (int c = 0; c < k_; ++c)
    for (int i = 0; i < d_; ++i) {
      const float x = C_[size_t(c) * d_ + i];
      if (k_ % 16 != 0) ct_[size_t(i) * k_ + c] = x;
      else ctile_[size_t(c / 16 * 16) * d_ + size_t(i) * 16 + c % 16] = x;
    }
}

void NearestCodeword::search_exhaustive(const float* m2, int n, int* best) const {
  std::call_once(prepared_, [this] { prepare(); });
  std::call_once(layout_once_, [this] { make_exhaustive_layout(); });
  if (k_ % 16 != 0) {
    thread_local std::vector<float> dist;
    dist.resize(size_t(k_));
    for (int t = 0; t < n; ++t) best[t] = nearest_codeword(m2 + size_t(t) * d_, ct_.data(), cn_.data(), k_, d_, dist.data());
    return;
  }
  const int np = (n + kRows - 1) / kRows * kRows;  // rows past n repeat row 0 (their results unused)
  thread_local std::vector<float> pad, bd;
  thread_local std::vector<int> bi, out;
  const float* rows = m2;
  if (np != n) {
    pad.resize(size_t(np) * d_);
    std::memcpy(pad.data(), m2, sizeof(float) * size_t(n) * d_);
    for (int t = n; t < np; ++t) std::memcpy(pad.data() + size_t(t) * d_, m2, sizeof(float) * d_);
    rows = pad.data();
  }
  bd.resize(16 * size_t(np)), bi.resize(16 * size_t(np)), out.resize(size_t(np));
  nearest_rows(rows, np, d_, ctile_.data(), cn_.data(), k_, bd.data(), bi.data(), out.data());
  std::copy(out.begin(), out.begin() + n, best);
}

void NearestCodeword::search(const float* m2, int n, int* best, Stats* stats) const {
  if (stats) stats->rows += n;
  std::call_once(prepared_, [this] { prepare(); });
  if (!tables_ || kernel_level() < KernelLevel::AVX2) return search_exhaustive(m2, n, best);
  thread_local std::vector<uint8_t> fb;  // rows the exhaustive search decides (non-finite values)
  fb.assign(size_t(n), 0);
  prefiltered(m2, n, d_, k_, C_, cn_.data(), q8_.data(), sc_.data(), nc_.data(), ne_.data(), sq32_.data(), best, fb.data(), stats);
  for (int t = 0; t < n; ++t)
    if (fb[size_t(t)]) search_exhaustive(m2 + size_t(t) * d_, 1, best + t);
}

}  // namespace qt::kv
