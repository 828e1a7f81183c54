// bitsandbytes blockwise 4-bit quantization, shared by the nf4 and fp4 rows: the algorithm of
// bitsandbytes 0.50's `quantize_4bit` kernel for CPU tensors (backends/default/ops.py; there is
// no CPU-specific quantize_4bit), bit-exact with it (tests/golden/make_scheme_goldens.py), and
// docs/spec/bitsandbytes.md §Quantization and packing. On the flattened tensor (n values,
// blocks of `blocksize`, the last may be partial), all in fp32:
//   full block:  absmax = max|x| (stored as is, 0 for a zero block);
//                scaled = clamp(x · (1 / max(absmax, 1e-38)), −1, 1)   (multiply by reciprocal)
//   last, partial block: am = max(max|x|, 1e-38), stored as its absmax (so a zero tail stores
//                1e-38, not 0); scaled = clamp(x / am, −1, 1)           (a true division)
//   code: the sorted table's 15 midpoints m_i = (v_i + v_{i+1})/2 (fp32); the sorted position is
//         #{i : m_i < scaled} (torch.bucketize, right=False: a value exactly on a midpoint goes
//         to the lower code), mapped through `order` to the table index (identity for NF4).
//   packing: byte i = code[2i] << 4 | code[2i+1]; shape [ceil(n/2), 1]. An odd n is padded with
//         the code of the value 0.0 (bitsandbytes pads `scaled` with a zero before bucketize):
//         7 for NF4, 0 for FP4 — not with code 0.
//   dequantize: table[code] · absmax[block] in fp32, then cast to the weights' dtype.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "libquant/cpu_features.h"
#include "libquant/schemes/detail.h"

namespace qt::schemes_detail {

PackedLayout bnb4_layout(const SchemeParams& p, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  PackedLayout l;
  l.data = {DType::U8, {(n + 1) / 2, 1}};
  l.scales = {DType::F32, {(n + p.group_size - 1) / p.group_size}};
  return l;
}

// Cloned for AVX2 (the library is built for the baseline ISA; convert runs this over every
// weight): the same IEEE operations per element, so both clones give the same bits.
// Codes of one block: x = w / absmax (a partial block divides, a full one multiplies by the
// reciprocal, as bitsandbytes' CPU kernel does), clamped to [-1, 1]; its code is order[#{i :
// mid[i] < x}], which is std::lower_bound's position over the sorted midpoints (ties stay with
// the lower code) counted without branches.
__attribute__((target_clones("avx2", "default"))) void bnb4_block_codes(const float* w, int64_t len, bool partial,
                                                                        float clamped, float inv, const float* mid,
                                                                        const uint8_t* order, uint8_t* codes) {
  float x[4096];
  if (partial)
    for (int64_t i = 0; i < len; ++i) x[i] = w[i] / clamped;
  else
    for (int64_t i = 0; i < len; ++i) x[i] = w[i] * inv;
  float m[15];
  for (int k = 0; k < 15; ++k) m[k] = mid[k];
  for (int64_t i = 0; i < len; ++i) codes[i] = uint8_t(bnb4_position(x[i], m));
  if (order)  // nullptr: the table is sorted (nf4), the position is the code
    for (int64_t i = 0; i < len; ++i) codes[i] = order[codes[i]];
}

// The same codes for a full block (len a multiple of 32), packed straight into bytes: AVX2
// intrinsics, because the compiler's clone of the loop above leaves the 15 compares per value
// scalar-ish and the nibble packing scalar (perf: 40% of an 8B nf4 convert). Same IEEE operations
// per element (multiply by the reciprocal, clamp, 15 ordered compares), so the same bits;
// tests/test_schemes.cpp compares it with the loop above at every kernel level.
__attribute__((target("avx2"))) void bnb4_full_block_avx2(const float* w, int64_t len, float inv, const float* mid,
                                                          const uint8_t* order, uint8_t* dst) {
  __m256 m[15];
  for (int k = 0; k < 15; ++k) m[k] = _mm256_set1_ps(mid[k]);
  const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-1.0f), hi = _mm256_set1_ps(1.0f);
  const __m256i fix = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undo the packs' lane interleave
  const __m256i table = order ? _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(order)))
                              : _mm256_setzero_si256();
  const __m256i hi_lo = _mm256_set1_epi16(0x0110);  // byte pair (16, 1): 16·code[2i] + code[2i+1]
  for (int64_t i = 0; i < len; i += 32) {
    // Four independent counts, midpoint-major: each compare chain is 15 deep, so they interleave.
    __m256 v[4];
    __m256i c[4];
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(w + i + 8 * j), vinv), lo), hi);
      c[j] = _mm256_setzero_si256();
    }
    for (int k = 0; k < 15; ++k)
      for (int j = 0; j < 4; ++j)
        c[j] = _mm256_sub_epi32(c[j], _mm256_castps_si256(_mm256_cmp_ps(m[k], v[j], _CMP_LT_OQ)));
    __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
    b = _mm256_permutevar8x32_epi32(b, fix);  // 32 codes, one byte each, in order
    if (order) b = _mm256_shuffle_epi8(table, b);
    const __m256i pairs = _mm256_maddubs_epi16(b, hi_lo);
    const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs, pairs), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i / 2), _mm256_castsi256_si128(bytes));
  }
}

Bnb4Book::Bnb4Book(const float* t, const uint8_t* o) : table(t), order(o) {
  // Sorted table values (order[i] is the code of the i-th smallest) and their midpoints.
  for (int i = 0; i < 15; ++i) mid[i] = (table[order[i]] + table[order[i + 1]]) / 2.0f;
}

PackedTensor bnb4_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p, const Bnb4Book& book) {
  PackedLayout l = bnb4_layout(p, rows, cols);
  OutTensor data(l.data), scales(l.scales);
  const float* mid = book.mid;
  const uint8_t* order = book.order;
  const int64_t n = rows * cols, bs = p.group_size;
  const int64_t full = n / bs * bs;
  uint8_t* out = data.as<uint8_t>();
  float* absmax = scales.as<float>();
  const float tiny = 1e-38f;
  if (n % 2) out[n / 2] = order[bnb4_position(0.0f, mid)];  // the low nibble of the last byte
  const int64_t nblocks = (n + bs - 1) / bs;
  bool sorted = true;
  for (int i = 0; i < 16; ++i) sorted &= order[i] == i;
  const bool avx2 = kernel_level() >= KernelLevel::AVX2 && bs % 32 == 0;
  // Blocks are independent and even-sized, so no two blocks share a byte.
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t b0 = blk * bs;
    const int64_t len = std::min(bs, n - b0);
    const float am = span_absmax(w + b0, len);
    const bool partial = b0 >= full;
    const float clamped = std::max(am, tiny);
    absmax[blk] = partial ? clamped : am;
    if (avx2 && !partial) {
      bnb4_full_block_avx2(w + b0, len, bnb4_inverse(am), mid, sorted ? nullptr : order, out + b0 / 2);
      continue;
    }
    uint8_t codes[4096];  // blocksize ≤ 4096 (bitsandbytes' largest)
    bnb4_block_codes(w + b0, len, partial, clamped, bnb4_inverse(am), mid, sorted ? nullptr : order, codes);
    uint8_t* dst = out + b0 / 2;  // b0 is even
    int64_t i = 0;
    for (; i + 1 < len; i += 2) dst[i / 2] = uint8_t(codes[i] << 4 | codes[i + 1]);
    if (i < len) dst[i / 2] |= uint8_t(codes[i] << 4);  // odd n: the low nibble is set above
  }
  return finish_packed(p, rows, cols, data, scales);
}

void bnb4_dequantize(const PackedTensor& t, const float* table, float* out) {
  const int64_t n = t.rows * t.cols, bs = t.params.group_size;
  const float* absmax = t.scales.as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    const uint8_t b = t.data.data[k / 2];
    const int code = (k % 2 == 0) ? (b >> 4) : (b & 15);
    out[k] = bnb4_value(table, code, absmax[k / bs], t.params.dtype);
  }
}

GroupParams bnb4_fit_rtn(const float* v, int64_t n) {
  return {span_absmax(v, n), 0.0f};  // stored as is, 0 for a zero block (coded with max(absmax, 1e-38))
}

int bnb4_grid_code(float x, float absmax, const Bnb4Book& book) {
  return book.order[bnb4_position(x * bnb4_inverse(absmax), book.mid)];
}

void bnb4_pack_row(const int16_t* q, int64_t cols, uint8_t* dst) {
  for (int64_t j = 0; j < cols; j += 2) dst[j / 2] = uint8_t(q[j] << 4 | q[j + 1]);
}

}  // namespace qt::schemes_detail
