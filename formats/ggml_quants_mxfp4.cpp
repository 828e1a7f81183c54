// MXFP4 (ggml's block_mxfp4, ggml-common.h: u8 e; u8 qs[16] = 17 bytes per 32 values): the OCP
// Microscaling format's E2M1 codes with one E8M0 exponent per block. ggml stores the E2M1 values
// doubled (kvalues_mxfp4 = 0, 1, 2, 3, 4, 6, 8, 12 and their negatives) and scales them by
// 2^(e − 128) (GGML_E8M0_TO_FP32_HALF), so a value is kvalues[code] · 2^(e − 128); element j of
// the block sits in the low nibble of qs[j], element j + 16 in its high nibble.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/ggml_quants_common.h"

namespace qt::ggml {

namespace {

// ggml-impl.h ggml_e8m0_to_fp32_half: 2^(e − 128), the two smallest exponents as denormals.
float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ggml-quants.c best_index_mxfp4: the first of the 16 codes whose value kvalues[i] · d is nearest x.
// Restated without the scan, to the same code: only +0 and the codes of x's sign can be strictly
// nearer than +0 (−0 ties it, the other sign is farther), so the answer is the magnitude m whose
// |kvalues[m] · d − |x|| is least, the smaller m on a tie, as code m or 8 + m for a negative x.
// Those errors fall strictly towards |x| and rise strictly past it (grid steps are ≥ d and
// |x| < 32 d, far above float rounding), so m is the grid point just below |x| or the one after,
// the two errors computed as ggml computes them (fabsf(k·d − x) equals fabsf(k·d − |x|)).
int best_index(float x, float d) {
  static constexpr float kMag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  const float ax = std::fabs(x);
  int m = 0;
  for (int i = 1; i < 8; ++i) m += kMag[i] * d <= ax;
  if (m < 7 && std::fabs(kMag[m + 1] * d - ax) < std::fabs(kMag[m] * d - ax)) ++m;
  return x < 0 && m > 0 ? 8 + m : m;
}

// The block's codes for exponent e, and their importance-weighted squared error (imp null: 1 each).
float encode(const float* x, const float* imp, uint8_t e, uint8_t* y) {
  const float d = e8m0_half(e);
  float err = 0;
  y[0] = e;
  for (int j = 0; j < 16; ++j) {
    const int a = best_index(x[j], d), b = best_index(x[j + 16], d);
    y[1 + j] = uint8_t(a | (b << 4));
    const float da = kMxfp4[a] * d - x[j], db = kMxfp4[b] * d - x[j + 16];
    err += (imp ? imp[j] : 1.0f) * da * da + (imp ? imp[j + 16] : 1.0f) * db * db;
  }
  return err;
}

}  // namespace

void dequantize_mxfp4(GgmlType, const uint8_t* src, float* dst, size_t nb) {
  for (size_t i = 0; i < nb; ++i, src += 17, dst += 32) {
    const float d = e8m0_half(src[0]);
    for (int j = 0; j < 16; ++j) {
      dst[j] = kMxfp4[src[1 + j] & 0x0F] * d;
      dst[j + 16] = kMxfp4[src[1 + j] >> 4] * d;
    }
  }
}

// Without importances ggml's quantize_row_mxfp4_ref: e = floor(log2(amax)) − 2 + 127 (the largest
// magnitude lands in [4, 8) of the doubled grid, near its top value 12 = 6 · 2), 0 for a zero
// block. With importances the exponents e − 1, e, e + 1 are tried and the least weighted squared
// error kept, e first on a tie (llama.cpp's quantize_mxfp4 ignores the imatrix; one step down
// trades the top values' clipping for finer steps below).
void quantize_mxfp4(GgmlType, const float* x, const float* imp, uint8_t* y) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const uint8_t e = amax > 0 ? uint8_t(std::floor(std::log2(amax)) - 2 + 127) : 0;
  const float err = encode(x, imp, e, y);
  if (!imp || amax == 0) return;
  float best = err;
  uint8_t cand[17];
  for (int de : {-1, 1}) {
    const int ec = int(e) + de;
    if (ec < 0 || ec > 254) continue;
    const float c = encode(x, imp, uint8_t(ec), cand);
    if (c < best) best = c, std::memcpy(y, cand, 17);
  }
}

// Calibrated rounding's codes are ordered by value (ggml_quantize.h GgmlCodeRange: 0..14 for
// −6 .. −0.5, +0, 0.5 .. 6 times the scale); the stored E2M1 code of each (−0 is never chosen).
void pack_codes_mxfp4(GgmlType, const uint8_t* L, uint8_t* y) {
  static constexpr uint8_t kCode[15] = {15, 14, 13, 12, 11, 10, 9, 0, 1, 2, 3, 4, 5, 6, 7};
  for (int j = 0; j < 16; ++j) y[1 + j] = uint8_t(kCode[L[j]] | (kCode[L[j + 16]] << 4));
}

}  // namespace qt::ggml
