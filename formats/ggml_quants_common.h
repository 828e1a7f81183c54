// What the ggml block families (ggml_quants_legacy.cpp, ggml_quants_k.cpp, ggml_quants_iq4nl.cpp,
// ggml_quants_mxfp4.cpp)
// share: their entry points for the type rows of ggml_blocks.h, block sizes and the fp16 scale
// fields, read exactly and written round-to-nearest-even.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "formats/ggml_blocks.h"
#include "formats/tensor.h"

namespace qt::ggml {

// ggml's kvalues_iq4nl (ggml-common.h): the non-uniform 4-bit grid of IQ4_NL and IQ4_XS.
inline constexpr int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// ggml's kvalues_mxfp4 (ggml-common.h): MXFP4's E2M1 values, doubled.
inline constexpr int8_t kMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Per family, for its types t (legacy: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; k: Q2_K..Q6_K; iq4_nl:
// IQ4_NL, IQ4_XS; mxfp4: MXFP4): dequantize_F turns `nb` consecutive blocks into fp32, bit-exact with gguf-py;
// quantize_F writes one block, by the reference rule when imp is null, else with `imp` (one
// importance per value of x) never a larger importance-weighted error than the reference rule.
// ggml_blocks.cpp runs them over the blocks of a tensor.
void dequantize_legacy(GgmlType t, const uint8_t* src, float* dst, size_t nb);
void quantize_legacy(GgmlType t, const float* x, const float* imp, uint8_t* y);
// quantize_legacy with imp, for a block of a row whose mean x² is sigma2: llama-quantize's Q4_1 /
// Q5_1 imatrix rule, one of those types' candidates, weighs by the row's spread (quantize_legacy
// uses the block's own).
void quantize_legacy_in_row(GgmlType t, const float* x, const float* imp, float sigma2, uint8_t* y);
void dequantize_k(GgmlType t, const uint8_t* src, float* dst, size_t nb);
void quantize_k(GgmlType t, const float* x, const float* imp, uint8_t* y);
void dequantize_iq4_nl(GgmlType t, const uint8_t* src, float* dst, size_t nb);
void quantize_iq4_nl(GgmlType t, const float* x, const float* imp, uint8_t* y);
void dequantize_mxfp4(GgmlType t, const uint8_t* src, float* dst, size_t nb);
void quantize_mxfp4(GgmlType t, const float* x, const float* imp, uint8_t* y);
// IQ4_NL as llama-quantize writes it (ggml-quants.c quantize_iq4_nl without an imatrix), where
// its bytes are wanted: the fallback of a 256-block type inside a llama.cpp mix (ggml_quantize.h).
void quantize_iq4_nl_llama(const float* x, uint8_t* y);

// llama.cpp's make_qkx3_quants (ggml-quants.c), restated for the calls its imatrix paths make
// (weights given, squared error; quantize_row_q4_1_impl, _q5_1_impl, _q4_K_impl, _q5_K_impl): the
// minimum is clamped to at most 0, the min-max grid is tried first, then nstep + 1 iscales
// (rmin + rdelta·is + nmax) / (max − min), each refit by weighted least squares of (scale, min)
// (min > 0 refit with min 0), the least weighted error kept. Returns the scale, *the_min = −min;
// L the codes 0..nmax.
float make_qkx3(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                float rmin, float rdelta, int nstep);

// pack_codes_F: the codes L (one per element of the block, unsigned as ggml_quantize.h's
// GgmlCodeRange says) written into block y, its scale fields left as they are: the packing half
// of quantize_F, which calls it too.
void pack_codes_legacy(GgmlType t, const uint8_t* L, uint8_t* y);
void pack_codes_k(GgmlType t, const uint8_t* L, uint8_t* y);
void pack_codes_iq4_nl(GgmlType t, const uint8_t* L, uint8_t* y);
void pack_codes_mxfp4(GgmlType t, const uint8_t* L, uint8_t* y);

constexpr int QK = 32;     // elements of a legacy / IQ4_NL block
constexpr int QK_K = 256;  // elements of a K-quant super-block

// The fp16 field at p (little-endian) -> fp32, exact (numpy astype(float32)); inline so the
// dequantizing loops stay tight.
inline float h2f(const uint8_t* p) {
  uint16_t h = uint16_t(p[0] | (p[1] << 8));
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: value = mant * 2^-24, exact in fp32
      float f = float(mant) * (1.0f / 16777216.0f);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// fp32 -> the fp16 field at p (little-endian), round-to-nearest-even.
inline void put_f16(uint8_t* p, float f) {
  const uint16_t h = f32_to_f16(f);
  p[0] = uint8_t(h & 0xff);
  p[1] = uint8_t(h >> 8);
}

// ggml's nearest_int (ggml-quants.c): round half to even through the fp32 mantissa (|v| < 2^22).
inline int nearest_int(float v) {
  float f = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// Value of largest magnitude among a block's QK values (the first one on ties), signed: Q4_0, Q5_0
// and IQ4_NL scale by it so that it maps to the code range's end (-8 / -16 / -127) exactly.
inline float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < QK; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
  return max;
}

}  // namespace qt::ggml
