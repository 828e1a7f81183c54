// SchemeGrid: each scheme's RTN rule, rounding and packing as separate steps (grid.h). The
// arithmetic repeats the scheme files' line for line (same operations, same order, no FMA
// contraction), so that fit_rtn + code + pack reproduces quantize_weights byte for byte.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "libquant/schemes/grid.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "formats/error.h"
#include "libquant/schemes/detail.h"

namespace qt {

using namespace schemes_detail;

namespace {
enum Kind { kAffineK = 1, kInt8K, kInt8CtK, kInt4K, kInt4CtK, kBnb4K };

}  // namespace

SchemeGrid::SchemeGrid(const SchemeParams& p) : p_(p) {
  find_scheme(p.scheme);
  if (p.scheme == "affine") kind_ = kAffineK, qmin_ = 0, qmax_ = (1 << p.bits) - 1;
  else if (p.scheme == "int8") kind_ = kInt8K, qmin_ = -128, qmax_ = 127;
  else if (p.scheme == "int8_ct") kind_ = kInt8CtK, qmin_ = -128, qmax_ = 127;
  else if (p.scheme == "int4") kind_ = kInt4K, qmin_ = -8, qmax_ = 7;
  else if (p.scheme == "int4_ct") kind_ = kInt4CtK, qmin_ = -8, qmax_ = 7;
  else if (p.scheme == "nf4" || p.scheme == "fp4") {
    kind_ = kBnb4K, qmin_ = 0, qmax_ = 15;
    table_ = p.scheme == "nf4" ? nf4_table() : fp4_table();
    // Sorted position -> code; a stable sort keeps fp4's +0 (code 0) before −0 (code 8), as
    // fp4.cpp's order table does.
    std::iota(order_, order_ + 16, uint8_t(0));
    std::stable_sort(order_, order_ + 16, [&](uint8_t a, uint8_t b) { return table_[a] < table_[b]; });
    for (int i = 0; i < 15; ++i) mid_[i] = (table_[order_[i]] + table_[order_[i + 1]]) / 2.0f;
  } else {
    user_error("--scheme {}: no calibrated quantizer for this scheme", p.scheme);
  }
}

int64_t SchemeGrid::group_len(int64_t cols) const { return p_.group_size == 0 ? cols : p_.group_size; }

bool SchemeGrid::fits(int64_t rows, int64_t cols, std::string* why) const {
  if (!scheme_fits(p_, rows, cols, why)) return false;
  if (kind_ == kBnb4K && cols % p_.group_size != 0) {
    if (why) *why = "a block would span two rows (the block size does not divide the row)";
    return false;
  }
  return true;
}

GroupParams SchemeGrid::fit_rtn(const float* v, int64_t n) const {
  GroupParams g;
  switch (kind_) {
    case kAffineK: {
      const float n_bins = float(qmax_), eps = 1e-7f;
      float w_min = std::numeric_limits<float>::infinity(), w_max = -w_min;
      for (int64_t j = 0; j < n; ++j) w_max = std::max(w_max, v[j]), w_min = std::min(w_min, v[j]);
      const bool neg = std::abs(w_min) > std::abs(w_max);
      float scale = std::max((w_max - w_min) / n_bins, eps);
      scale = neg ? scale : -scale;
      const float edge = neg ? w_min : w_max;
      const float q0 = std::rint(edge / scale);
      g.scale = scale;
      if (q0 != 0) g.scale = edge / q0, g.bias = edge;
      return g;
    }
    case kInt8K:
    case kInt4K:
    case kInt8CtK:
    case kInt4CtK:
    case kBnb4K: {
      float amax = 0.0f;
      for (int64_t j = 0; j < n; ++j) amax = std::max(amax, std::abs(v[j]));
      if (kind_ == kInt8K) g.scale = amax / 127.0f == 0.0f ? 1.0f : amax / 127.0f;
      else if (kind_ == kInt4K) g.scale = amax / 7.0f == 0.0f ? 1.0f : amax / 7.0f;
      else if (kind_ == kInt8CtK || kind_ == kInt4CtK) {  // (qmax − qmin)/2: 127.5 or 7.5
        g.scale = round_to(p_.dtype, amax / (kind_ == kInt8CtK ? 127.5f : 7.5f));
        if (g.scale == 0.0f) g.scale = dtype_eps(p_.dtype);
      } else {
        g.scale = amax;  // bitsandbytes stores 0 for a zero block and codes with max(am, 1e-38)
      }
      return g;
    }
  }
  return g;
}

GroupParams SchemeGrid::stored(const GroupParams& g) const {
  switch (kind_) {
    case kAffineK: return {round_to(p_.dtype, g.scale), round_to(p_.dtype, g.bias)};
    case kInt8CtK:
    case kInt4CtK: return {round_to(p_.dtype, g.scale), 0.0f};
    default: return {g.scale, 0.0f};  // fp32 scales
  }
}

int SchemeGrid::code(float x, const GroupParams& g) const {
  switch (kind_) {
    case kAffineK: {
      const float q = std::rint((x - g.bias) / g.scale);
      return int(std::min(std::max(q, 0.0f), float(qmax_)));
    }
    case kInt8K: return int(std::min(std::max(std::rint(x / g.scale), -128.0f), 127.0f));
    case kInt8CtK:
    case kInt4CtK: {
      const float y = round_to(p_.dtype, x / g.scale);
      return int(std::rint(std::min(std::max(y, float(qmin_)), float(qmax_))));
    }
    case kInt4K: return int(std::min(std::max(std::rint(x / g.scale) + 8.0f, 0.0f), 15.0f)) - 8;
    case kBnb4K: {
      const float inv = 1.0f / std::max(g.scale, 1e-38f);
      const float y = std::min(std::max(x * inv, -1.0f), 1.0f);
      return order_[std::lower_bound(mid_, mid_ + 15, y) - mid_];
    }
  }
  return 0;
}

float SchemeGrid::value(int q, const GroupParams& g) const {
  switch (kind_) {
    case kAffineK: return affine_dequant(uint32_t(q), g.scale, g.bias, p_.dtype);
    case kInt8CtK:
    case kInt4CtK: return round_to(p_.dtype, float(q) * g.scale);
    case kBnb4K: return round_to(p_.dtype, table_[q] * g.scale);
    default: return float(q) * g.scale;
  }
}

PackedTensor SchemeGrid::pack(const int16_t* codes, const GroupParams* params, int64_t rows, int64_t cols) const {
  std::string why;
  if (!fits(rows, cols, &why)) user_error("[{}, {}]: {}", rows, cols, why);
  const PackedLayout l = packed_layout(p_, rows, cols);
  OutTensor data(l.data), scales(l.scales);
  std::optional<OutTensor> biases;
  if (l.biases) biases.emplace(*l.biases);
  const int64_t gl = group_len(cols), ng = cols / gl;
  uint8_t* out = data.as<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int16_t* q = codes + r * cols;
    for (int64_t g = 0; g < ng; ++g) scales.store_float(size_t(r * ng + g), params[r * ng + g].scale);
    switch (kind_) {
      case kAffineK: {  // one LSB-first bit stream per row
        for (int64_t g = 0; g < ng; ++g) biases->store_float(size_t(r * ng + g), params[r * ng + g].bias);
        uint8_t* dst = out + size_t(r) * size_t(cols) * size_t(p_.bits) / 8;
        uint64_t acc = 0;
        int nacc = 0;
        for (int64_t j = 0; j < cols; ++j) {
          acc |= uint64_t(q[j]) << nacc;
          nacc += p_.bits;
          while (nacc >= 8) *dst++ = uint8_t(acc & 0xff), acc >>= 8, nacc -= 8;
        }
        break;
      }
      case kInt8K:
      case kInt8CtK:
        for (int64_t j = 0; j < cols; ++j) reinterpret_cast<int8_t*>(out)[r * cols + j] = int8_t(q[j]);
        break;
      case kInt4CtK: {  // u = q + 8, eight to an int32, LSB first
        uint32_t* dst = reinterpret_cast<uint32_t*>(out) + r * (cols / 8);
        for (int64_t j = 0; j < cols; j += 8) {
          uint32_t w = 0;
          for (int k = 0; k < 8; ++k) w |= uint32_t(q[j + k] + 8) << (4 * k);
          dst[j / 8] = w;
        }
        break;
      }
      case kInt4K:
      case kBnb4K:  // two codes a byte, high nibble first (int4: u = q + 8)
        for (int64_t j = 0; j < cols; j += 2) {
          const int off = kind_ == kInt4K ? 8 : 0;
          out[(r * cols + j) / 2] = uint8_t((q[j] + off) << 4 | (q[j + 1] + off));
        }
        break;
    }
  }
  return finish_packed(p_, rows, cols, data, scales, biases ? &*biases : nullptr);
}

}  // namespace qt
