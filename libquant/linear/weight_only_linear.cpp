// The weight-only packed Linear (MLX affine 2–8 bit, bitsandbytes nf4/fp4): the codes stay packed
// as stored; each forward decodes one panel of NR output rows at a time into the operand form of
// the dense GEMM microkernels (kernels::Family, gemm.h: fp32, or bf16 pairs with --compute bf16)
// and runs their tiles over every token row — the decode is amortised over the batch, and no
// decoded copy of the matrix outlives the panel. Decoded values are exactly dequantize_weights'
// (affine: q·s and +b rounded separately to the dtype, as MLX; nf4/fp4: table·absmax rounded to
// the dtype), so only the summation order differs from reference_gemm(ActMode::None).
// One token with fp32 scales instead runs the factored GEMVs of kernels/affine_gemv.h (MLX's qmv:
// scale and bias applied per group to Σ q·x, never to each weight), which differ from the
// reference in fp32 rounding as well as in order; affine's also rounds the token per group to
// int16 (within 2^-16 of the group's largest value). Where batches would run fp32 panels, 4-/8-bit affine weights with fp32 scales run the
// same integer form as a GEMM (kernels/affine_i16_gemm.h) instead. On request (PackedLinearOptions::weight_act), 4-bit affine weights of any scale
// dtype run every batch through int8 tokens instead (kernels/affine_i8.h: the codes repacked once
// at load, s·q + b never rounded to the dtype).
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "formats/error.h"
#include "libquant/cpu_features.h"
#include "libquant/kernels/affine8_gemv.h"
#include "libquant/kernels/affine_gemv.h"
#include "libquant/kernels/affine_i16_gemm.h"
#include "libquant/kernels/affine_i8.h"
#include "libquant/kernels/affine_weights_avx512.h"
#include "libquant/kernels/gemm.h"
#include "libquant/kernels/hsum_avx2.h"
#include "libquant/kernels/lut4_gemv.h"
#include "libquant/linear/decoded_rows.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/parallel.h"
#include "libquant/schemes/packed_values.h"

namespace qt {
namespace {

using namespace schemes_detail;
using kernels::affine_of;
using kernels::round_bf16_16;

// GCC 12 reports its own AVX-512 intrinsics' undefined-vector idiom (cvtepu8, srli, reduce) as
// uninitialised once they are inlined into the functions below.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// The 16 codes at element j of a row of 4- or 8-bit codes, widened to 32-bit lanes.
template <int kBits>
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512i codes_16(const uint8_t* row, int64_t j) {
  __m128i codes;
  if constexpr (kBits == 8) {
    codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + j));
  } else {  // element 2i is the low nibble of byte i
    const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + j / 2));
    codes = _mm_unpacklo_epi8(_mm_and_si128(raw, _mm_set1_epi8(0x0f)),
                              _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f)));
  }
  return _mm512_cvtepu8_epi32(codes);
}

// One MLX affine group of 4- or 8-bit codes (g a multiple of 16) at `bytes`: out = q·s, then + b,
// each rounded to bf16 when `bf16` (as affine_dequant), multiply and add never fused.
__attribute__((target("avx512f,avx512bw"))) void decode_group_avx512(const uint8_t* bytes, int bits, int64_t g, float s,
                                                                     float b, bool bf16, float* out) {
  const __m512 vs = _mm512_set1_ps(s), vb = _mm512_set1_ps(b);
  for (int64_t j = 0; j < g; j += 16) {
    const __m512i q = bits == 8 ? codes_16<8>(bytes, j) : codes_16<4>(bytes, j);
    _mm512_storeu_ps(out + j, affine_of(_mm512_cvtepi32_ps(q), vs, vb, bf16));
  }
}

// One token against one affine row without the decoded row going through memory, in dot_avx512's
// order (two accumulators over steps of 32, the same reduction), so the result has the bits of
// decode_row + dot_avx512 (g a multiple of 32). 4-bit groups decode their 16 possible weights once
// (the same arithmetic per code) and look the codes up in them (VPERMPS); 8-bit ones compute each.
template <int kBits>
__attribute__((target("avx512f,avx512bw,fma"))) float dot_affine_avx512(const uint8_t* row, int64_t k, int64_t g,
                                                                        const float* scales, const float* biases,
                                                                        bool bf16, const float* x) {
  const __m512 iota = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t j0 = 0; j0 < k; j0 += g) {
    const __m512 vs = _mm512_set1_ps(scales[j0 / g]), vb = _mm512_set1_ps(biases[j0 / g]);
    const __m512 table = affine_of(iota, vs, vb, bf16);
    auto w16 = [&](int64_t j) {
      if constexpr (kBits == 4) return _mm512_permutexvar_ps(codes_16<4>(row, j), table);
      return affine_of(_mm512_cvtepi32_ps(codes_16<8>(row, j)), vs, vb, bf16);
    };
    for (int64_t i = j0; i < j0 + g; i += 32) {
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), w16(i), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), w16(i + 16), acc1);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// The same for one nf4/fp4 row (blocks of bs, a multiple of 32, inside the row; element 2i is the
// high nibble of byte i): each block's 16 weights table[q]·absmax (rounded to bf16 when `bf16`, as
// decode_bnb4_avx2) once, the codes looked up in them; the bits of decode_row + dot_avx512.
__attribute__((target("avx512f,avx512bw,fma"))) float dot_bnb4_avx512(const uint8_t* row, int64_t k, int64_t bs,
                                                                      const float* absmax, const float* table,
                                                                      bool bf16, const float* x) {
  const __m512 tab = _mm512_loadu_ps(table);
  auto codes = [&](int64_t j) {
    const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + j / 2));
    return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f)),
                                                  _mm_and_si128(raw, _mm_set1_epi8(0x0f))));
  };
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t j0 = 0; j0 < k; j0 += bs) {
    __m512 block = _mm512_mul_ps(tab, _mm512_set1_ps(absmax[j0 / bs]));
    if (bf16) block = round_bf16_16(block);
    for (int64_t i = j0; i < j0 + bs; i += 32) {
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_permutexvar_ps(codes(i), block), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_permutexvar_ps(codes(i + 16), block), acc1);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}
#pragma GCC diagnostic pop

// The same functions on 8 lanes for AVX2 machines (bits 4 and 8, g a multiple of 8).
__attribute__((target("avx2"))) inline __m256 round_bf16_8(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  u = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(int(0xffff0000u))));
}

// Eight MLX affine weights from `bytes` (4- or 8-bit codes; element 2i is the low nibble of byte i):
// q·s, then + b, each rounded to bf16 when `bf16` (as affine_dequant), multiply and add never fused.
template <int kBits>
__attribute__((target("avx2"), always_inline)) inline __m256 affine_8(const uint8_t* bytes, __m256 vs, __m256 vb,
                                                                      bool bf16) {
  __m128i codes;
  if constexpr (kBits == 8) {
    codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes));
  } else {
    int32_t four;
    std::memcpy(&four, bytes, 4);
    const __m128i raw = _mm_cvtsi32_si128(four);
    codes = _mm_unpacklo_epi8(_mm_and_si128(raw, _mm_set1_epi8(0x0f)),
                              _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f)));
  }
  __m256 w = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes)), vs);
  if (bf16) w = round_bf16_8(w);
  w = _mm256_add_ps(w, vb);
  if (bf16) w = round_bf16_8(w);
  return w;
}

template <int kBits>
__attribute__((target("avx2"))) void decode_group_avx2(const uint8_t* bytes, int64_t g, float s, float b, bool bf16,
                                                       float* out) {
  const __m256 vs = _mm256_set1_ps(s), vb = _mm256_set1_ps(b);
  for (int64_t j = 0; j < g; j += 8) _mm256_storeu_ps(out + j, affine_8<kBits>(bytes + j * kBits / 8, vs, vb, bf16));
}

void decode_group_avx2(const uint8_t* bytes, int bits, int64_t g, float s, float b, bool bf16, float* out) {
  if (bits == 8) return decode_group_avx2<8>(bytes, g, s, b, bf16, out);
  decode_group_avx2<4>(bytes, g, s, b, bf16, out);
}

// One row of bitsandbytes 4-bit codes (element i: the high nibble of byte i/2 when i is even), 8 at a
// time: the code picks table[code] with two 8-entry permutes and a blend on bit 3, times the
// block's absmax, rounded to bf16 when `bf16` — table[code]·absmax as bnb4_dequantize gives it.
// `first` is the row's flat index r·k (even; k and the block size multiples of 8, so 8 elements
// never straddle a block).
__attribute__((target("avx2"))) void decode_bnb4_avx2(const uint8_t* bytes, int64_t k, int64_t first, int64_t bs,
                                                      const float* absmax, const float* table, bool bf16, float* out) {
  const __m256 lo_tab = _mm256_loadu_ps(table), hi_tab = _mm256_loadu_ps(table + 8);
  for (int64_t j = 0; j < k; j += 8) {
    int32_t four;
    std::memcpy(&four, bytes + j / 2, 4);
    const __m128i raw = _mm_cvtsi32_si128(four);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f));
    const __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(0x0f));
    const __m256i codes = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(hi, lo));
    const __m256 v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo_tab, codes), _mm256_permutevar8x32_ps(hi_tab, codes),
                                      _mm256_castsi256_ps(_mm256_slli_epi32(codes, 28)));
    __m256 w = _mm256_mul_ps(v, _mm256_set1_ps(absmax[(first + j) / bs]));
    if (bf16) w = round_bf16_8(w);
    _mm256_storeu_ps(out + j, w);
  }
}

// One token against one affine row (bits 4 or 8, g a multiple of 8) without the decoded row going
// through memory: each 8 weights are decoded in registers exactly as decode_group_avx2 decodes
// them and multiplied into the accumulator at once (the few-token GEMV of forward_rows).
template <int kBits>
__attribute__((target("avx2,fma"))) float dot_affine_avx2(const uint8_t* row, int64_t k, int64_t g, const float* scales,
                                                          const float* biases, bool bf16, const float* x) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t j0 = 0; j0 < k; j0 += g) {
    const __m256 vs = _mm256_set1_ps(scales[j0 / g]), vb = _mm256_set1_ps(biases[j0 / g]);
    const uint8_t* bytes = row + j0 * kBits / 8;
    for (int64_t j = 0; j < g; j += 16) {  // g is a multiple of 16 (fast_decode_)
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + j0 + j), affine_8<kBits>(bytes + j * kBits / 8, vs, vb, bf16), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + j0 + j + 8),
                             affine_8<kBits>(bytes + (j + 8) * kBits / 8, vs, vb, bf16), acc1);
    }
  }
  return kernels::hsum8(_mm256_add_ps(acc0, acc1));
}

float dot_affine_avx2(const uint8_t* row, int bits, int64_t k, int64_t g, const float* scales, const float* biases,
                      bool bf16, const float* x) {
  if (bits == 8) return dot_affine_avx2<8>(row, k, g, scales, biases, bf16, x);
  return dot_affine_avx2<4>(row, k, g, scales, biases, bf16, x);
}

using kernels::Family;

const Family* pick(Compute compute) {
  const KernelLevel lvl = kernel_level();
  if (compute == Compute::BF16 && lvl >= KernelLevel::AVX512 && cpu_features().avx512_bf16)
    return kernels::family_bf16_avx512();
  if (lvl >= KernelLevel::AVX512) return kernels::family_f32_avx512();
  if (lvl == KernelLevel::AVX2) return kernels::family_f32_avx2();
  return nullptr;
}

class WeightOnlyLinear final : public Linear {
 public:
  WeightOnlyLinear(PackedTensor w, const float* bias, const PackedLinearOptions& opt)
      : w_(std::move(w)), n_(w_.rows), k_(w_.cols), compute_(opt.compute), fam_(pick(opt.compute)) {
    if (bias) bias_.assign(bias, bias + n_);
    int16_act_ = opt.act != ActMode::None;
    affine_ = find_scheme(w_.params.scheme).kernel == KernelFamily::Affine;
    if (affine_) {
      bits_ = w_.params.bits;
      groups_ = k_ / w_.params.group_size;
      scales_.resize(size_t(n_ * groups_));
      biases_.resize(size_t(n_ * groups_));
      fast_decode_ = kernel_level() >= KernelLevel::AVX2 && (bits_ == 4 || bits_ == 8) &&
                     (w_.params.dtype == DType::F32 || w_.params.dtype == DType::BF16) &&
                     w_.params.group_size % 16 == 0;
      for (size_t i = 0; i < scales_.size(); ++i) {
        scales_[i] = load_float(w_.scales, i);
        biases_[i] = load_float(w_.biases, i);
      }
      if (opt.weight_act != WeightAct::Default && kernels::affine_i8_supports(bits_, k_, w_.params.group_size)) {
        i8_ = std::make_unique<kernels::AffineI8>(
            kernels::pack_affine_i8(w_.data.data, scales_.data(), biases_.data(), n_, k_, w_.params.group_size));
        i8_per_token_ = opt.weight_act == WeightAct::Int8Token;
      }
    } else {
      const float* t = bnb_code_table(w_.params.scheme).data();
      std::copy(t, t + 16, table_);
      fast_bnb_ = kernel_level() >= KernelLevel::AVX2 && k_ % 8 == 0 && w_.params.group_size % 8 == 0 &&
                  (w_.params.dtype == DType::F32 || w_.params.dtype == DType::BF16);
    }
  }

  bool borrows_weights() const override { return true; }  // forwards decode w_'s codes in place

  // Row r as fp32, exactly dequantize_weights' row r.
  void dequantize_row(int64_t r, float* out) const override {
    if (r < 0 || r >= n_) user_error("row {} outside a weight of {} rows", r, n_);
    decode_row(r, out);
  }

  void forward(const float* x, int64_t m, float* y) const override {
    if (m <= 0) return;
    if (i8_) {
      kernels::affine_i8_gemm(*i8_, x, m, i8_per_token_, bias_.empty() ? nullptr : bias_.data(), y);
    } else if (!fam_ || m < 4) {
      forward_rows(x, m, y);
    } else if (affine_ && int16_act_ && fam_->a_bytes == 4 && w_.params.dtype == DType::F32 &&
               kernels::affine_i16_gemm_supported(bits_, k_, w_.params.group_size)) {
      // Where batches would run fp32 panels (fp32 compute, or bf16 without AVX512-BF16): the int16
      // GEMM (kernels/affine_i16_gemm.h), checked per call as the GEMV is (the kernel level can be
      // lowered after construction).
      kernels::affine_i16_gemm(bits_, w_.data.data, scales_.data(), biases_.data(), n_, k_, w_.params.group_size, x, m,
                               bias_.empty() ? nullptr : bias_.data(), y);
    } else {
      forward_panels(x, m, y);
    }
  }

  // The decode step's slices (llama_decode.cpp): affine-4 through int8 tokens, over its panels,
  // with forward()'s bits for that token. Not the lookup GEMV: arithmetic-bound, its rows want the
  // dynamic schedule of forward() — in fixed slices the team waits for its slowest thread (16-core
  // Xeon: affine-4 37–38 → 32–33 tok/s, NF4 42 → 36–40; int8 tokens 73–76 → 82–95).
  bool has_gemv_slices() const override { return i8_ && kernels::affine_i8_slices_supported(); }
  RowSlice gemv_slice(const float* x, int part, int parts, float* y) const override {
    const RowSlice rs = row_block_slice(n_, part, parts);  // whole 16-row panels
    kernels::affine_i8_gemv_panels(*i8_, x, i8_per_token_, rs.r0 / 16, (rs.r1 + 15) / 16,
                                   bias_.empty() ? nullptr : bias_.data(), y);
    return rs;
  }

  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  // What a forward reads: the int8-token panels (fp32 scales and biases) when they run, else the codes.
  size_t weight_bytes() const override { return i8_ ? i8_->bytes() : w_.bytes(); }
  std::string kind() const override {
    const std::string c = i8_ ? (i8_per_token_ ? "-a8-token" : "-a8")
                          : compute_ == Compute::BF16 && fam_ && fam_->a_bytes == 2 ? "-bf16"
                                                                                    : "";
    if (affine_) return "affine" + std::to_string(bits_) + "-g" + std::to_string(w_.params.group_size) + c;
    return w_.params.scheme + "-b" + std::to_string(w_.params.group_size) + c;
  }

 private:
  void decode_row(int64_t r, float* out) const {
    const DType dt = w_.params.dtype;
    if (affine_) {
      if (fast_decode_) {
        const int64_t g = w_.params.group_size, row_bytes = k_ * bits_ / 8;
        const uint8_t* row = w_.data.data + r * row_bytes;
        void (*decode_group)(const uint8_t*, int, int64_t, float, float, bool, float*) = decode_group_avx2;
        if (kernel_level() >= KernelLevel::AVX512) decode_group = decode_group_avx512;
        for (int64_t j0 = 0; j0 < k_; j0 += g) {
          const size_t gi = size_t(r * groups_ + j0 / g);
          decode_group(row + j0 * bits_ / 8, bits_, g, scales_[gi], biases_[gi], dt == DType::BF16, out + j0);
        }
        return;
      }
      if (dt == DType::F32) return decode_affine<true>(r, out);
      return decode_affine<false>(r, out);
    }
    const float* absmax = w_.scales.as<float>();
    const int64_t bs = w_.params.group_size;
    if (fast_bnb_) {
      decode_bnb4_avx2(w_.data.data + r * k_ / 2, k_, r * k_, bs, absmax, table_, dt == DType::BF16, out);
      return;
    }
    for (int64_t j = 0; j < k_; ++j) {
      const int64_t i = r * k_ + j;
      const uint8_t byte = w_.data.data[i / 2];
      const int code = (i & 1) ? (byte & 0x0f) : (byte >> 4);
      out[j] = round_to(dt, table_[code] * absmax[i / bs]);
    }
  }

  // One group at a time: its scale and bias once, then the codes (bits 2, 4, 8 never straddle a
  // byte; 3, 5, 6 read through a 64-bit window). q·s and +b round separately (MLX), to the dtype
  // unless it is fp32.
  template <bool kF32>
  void decode_affine(int64_t r, float* out) const {
    const DType dt = w_.params.dtype;
    const int64_t g = w_.params.group_size, row_bytes = k_ * bits_ / 8;
    const uint8_t* row = w_.data.data + r * row_bytes;
    const uint32_t mask = (1u << bits_) - 1;
    const bool byte_aligned = 8 % bits_ == 0;
    for (int64_t j0 = 0; j0 < k_; j0 += g) {
      const size_t gi = size_t(r * groups_ + j0 / g);
      const float s = scales_[gi], b = biases_[gi];
      for (int64_t j = j0; j < j0 + g; ++j) {
        const int64_t bit = j * bits_;
        uint32_t q;
        if (byte_aligned) {
          q = uint32_t(row[bit >> 3] >> (bit & 7)) & mask;
        } else {
          uint64_t v = 0;
          std::memcpy(&v, row + (bit >> 3), size_t(std::min<int64_t>(8, row_bytes - (bit >> 3))));
          q = uint32_t(v >> (bit & 7)) & mask;
        }
        if constexpr (kF32) {
          const float prod = float(q) * s;
          out[j] = prod + b;
        } else {
          out[j] = round_to(dt, round_to(dt, float(q) * s) + b);
        }
      }
    }
  }

  // A few tokens against 4-bit codes in groups of 64 with bf16 scales: each group's 16 weights
  // looked up (lut4_gemv.h). forward_rows asks after the factored GEMVs, which take fp32 scales.
  bool lut4() const {
    return (affine_ ? fast_decode_ && bits_ == 4 : fast_bnb_) && kernels::lut4_gemv_supports(k_, w_.params.group_size);
  }
  void lut4_rows(const float* x, int64_t m, float* y) const {
    const int64_t g = w_.params.group_size;
    const float* bias = bias_.empty() ? nullptr : bias_.data();
    thread_local std::vector<float> xp;
    xp.resize(size_t(m * k_));
    kernels::lut4_prepare(x, m, k_, !affine_, xp.data());
    const bool bf16 = w_.params.dtype == DType::BF16;
    if (!affine_)
      return kernels::bnb4_lut_rows(w_.data.data, w_.scales.as<float>(), table_, bf16, n_, k_, g, xp.data(), m, bias,
                                    y);
    kernels::affine4_lut_rows(w_.data.data, group_scales(), bf16, n_, k_, g, xp.data(), m, bias, y);
  }
  // The stored bf16 scales and biases where they are bf16 (half the bytes), else the fp32 copies.
  kernels::AffineGroupScales group_scales() const {
    const bool raw = w_.scales.dtype == DType::BF16 && w_.biases.dtype == DType::BF16;
    return {scales_.data(), biases_.data(), raw ? reinterpret_cast<const uint16_t*>(w_.scales.data) : nullptr,
            raw ? reinterpret_cast<const uint16_t*>(w_.biases.data) : nullptr};
  }

  // A few tokens against 8-bit codes with bf16 scales, each weight rounded as MLX does through
  // VCVTNE2PS2BF16 (affine8_gemv.h). forward_rows asks after the factored GEMVs, as for lut4.
  bool affine8() const {
    return affine_ && fast_decode_ && bits_ == 8 && w_.params.dtype == DType::BF16 &&
           kernels::affine8_gemv_supports(k_, w_.params.group_size);
  }
  void affine8_rows(const float* x, int64_t m, float* y) const {
    thread_local std::vector<float> xp;
    xp.resize(size_t(m * k_));
    kernels::affine8_prepare(x, m, k_, xp.data());
    kernels::affine8_rows(w_.data.data, group_scales(), n_, k_, w_.params.group_size, xp.data(), m,
                          bias_.empty() ? nullptr : bias_.data(), y);
  }

  // A few tokens (decode), or no SIMD family: the factored GEMV where it applies, else one decoded
  // row at a time against every token — no panel packing, which would cost more than the few dot
  // products.
  void forward_rows(const float* x, int64_t m, float* y) const {
    const int64_t g = w_.params.group_size;
    const float* bias = bias_.empty() ? nullptr : bias_.data();
    // fp32 scales only: a bf16/f16 model's weights are each rounded to that dtype, as MLX's CPU
    // backend computes them (mlx_lm's logits on the gpt_oss MLX golden differ by 0.056 without the
    // rounding), which the factored form cannot do.
    const bool factored = w_.params.dtype == DType::F32;
    if (affine_ && int16_act_ && factored && kernels::affine_gemv_supports(bits_, k_, g)) {
      // MLX's qmv: Σ q·x̃ in int16 pairs, scale and bias applied per group (affine_gemv.h).
      return gemv_tokens(
          x, m, y,
          [&](const float* xt, kernels::AffineGemvInput* in) { kernels::affine_gemv_prepare(bits_, xt, k_, g, in); },
          [&](const kernels::AffineGemvInput& in, int64_t r0, int64_t r1, float* yt) {
            kernels::affine_gemv_rows(bits_, w_.data.data, scales_.data(), biases_.data(), k_, g, in, r0, r1, bias, yt);
          });
    }
    if (!affine_ && factored && kernels::bnb4_gemv_supports(k_, g)) {
      // nf4/fp4 the same way: table[q] into FMAs, absmax per block.
      return gemv_tokens(
          x, m, y, [&](const float* xt, kernels::AffineGemvInput* in) { kernels::bnb4_gemv_prepare(xt, k_, g, in); },
          [&](const kernels::AffineGemvInput& in, int64_t r0, int64_t r1, float* yt) {
            kernels::bnb4_gemv_rows(w_.data.data, w_.scales.as<float>(), table_, k_, g, in, r0, r1, bias, yt);
          });
    }
    if (lut4()) return lut4_rows(x, m, y);
    if (affine8()) return affine8_rows(x, m, y);
    if (fast_decode_ && m == 1 && g % 32 == 0 && kernel_level() >= KernelLevel::AVX512) {  // decode: one token
      const int64_t row_bytes = k_ * bits_ / 8;
      const bool bf16 = w_.params.dtype == DType::BF16;
      auto dot = bits_ == 8 ? dot_affine_avx512<8> : dot_affine_avx512<4>;
#pragma omp parallel for schedule(dynamic, 32) if (n_ * k_ > (1 << 16))
      for (int64_t n = 0; n < n_; ++n)
        y[n] = dot(w_.data.data + n * row_bytes, k_, g, scales_.data() + n * groups_, biases_.data() + n * groups_,
                   bf16, x) +
               (bias_.empty() ? 0.0f : bias_[size_t(n)]);
      return;
    }
    if (!affine_ && fast_bnb_ && m == 1 && k_ % g == 0 && g % 32 == 0 && simd_dot_ >= KernelLevel::AVX512 &&
        kernel_level() >= KernelLevel::AVX512) {  // decode: one token, blocks inside rows
      const bool bf16 = w_.params.dtype == DType::BF16;
      const float* absmax = w_.scales.as<float>();
#pragma omp parallel for schedule(dynamic, 32) if (n_ * k_ > (1 << 16))
      for (int64_t n = 0; n < n_; ++n)
        y[n] = dot_bnb4_avx512(w_.data.data + n * k_ / 2, k_, g, absmax + n * k_ / g, table_, bf16, x) +
               (bias_.empty() ? 0.0f : bias_[size_t(n)]);
      return;
    }
    if (fast_decode_ && kernel_level() == KernelLevel::AVX2) {
      const int64_t g = w_.params.group_size, row_bytes = k_ * bits_ / 8;
      const bool bf16 = w_.params.dtype == DType::BF16;
#pragma omp parallel for schedule(dynamic, 32) if (n_ * k_ > (1 << 16))
      for (int64_t n = 0; n < n_; ++n) {
        const float* s = scales_.data() + n * groups_;
        const float* b = biases_.data() + n * groups_;
        for (int64_t t = 0; t < m; ++t)
          y[t * n_ + n] = dot_affine_avx2(w_.data.data + n * row_bytes, bits_, k_, g, s, b, bf16, x + t * k_) +
                          (bias_.empty() ? 0.0f : bias_[size_t(n)]);
      }
      return;
    }
    decoded_row_dots(
        n_, k_, [this](int64_t r, float* out) { decode_row(r, out); }, x, m, bias, y, 0, n_, true, simd_dot_);
  }

  // The factored GEMVs of affine_gemv.h, one token at a time: the token prepared once, then blocks
  // of 64 rows on the threads.
  template <typename Prepare, typename Rows>
  void gemv_tokens(const float* x, int64_t m, float* y, Prepare prepare, Rows rows) const {
    thread_local kernels::AffineGemvInput tls;
    const kernels::AffineGemvInput& in = tls;  // the caller's; an OpenMP thread's thread_local is another
    const int64_t blocks = (n_ + 63) / 64;
    for (int64_t t = 0; t < m; ++t) {
      prepare(x + t * k_, &tls);
      float* yt = y + t * n_;
#pragma omp parallel for schedule(dynamic, 1) if (n_ * k_ > (1 << 16))
      for (int64_t b = 0; b < blocks; ++b) rows(in, b * 64, std::min(n_, (b + 1) * 64), yt);
    }
  }

  // A batch: per panel of NR rows, decode, pack as the dense family packs, run its tiles.
  void forward_panels(const float* x, int64_t m, float* y) const {
    decoded_panel_gemm(
        *fam_, n_, k_, [this](int64_t r, float* out) { decode_row(r, out); }, x, m,
        bias_.empty() ? nullptr : bias_.data(), y);
  }

  PackedTensor w_;
  int64_t n_, k_;
  Compute compute_;
  const Family* fam_;
  bool affine_ = false;
  bool fast_decode_ = false;               // SIMD group decode (4/8-bit, f32/bf16 scales)
  bool int16_act_ = true;                  // not ActMode::None: affine tokens in int16 (forward_rows)
  bool fast_bnb_ = false;                  // AVX2 nf4/fp4 decode (k and block size multiples of 8, f32/bf16)
  KernelLevel simd_dot_ = kernel_level();  // the GEMV dot of forward_rows
  int bits_ = 4;
  int64_t groups_ = 1;
  std::vector<float> scales_, biases_, bias_;
  std::unique_ptr<kernels::AffineI8> i8_;  // affine 4-bit with int8 tokens (weight_act), or null
  bool i8_per_token_ = false;
  float table_[16] = {};
};

}  // namespace

std::unique_ptr<Linear> make_weight_only_linear(PackedTensor w, const float* bias, const PackedLinearOptions& opt) {
  return std::make_unique<WeightOnlyLinear>(std::move(w), bias, opt);
}

}  // namespace qt
