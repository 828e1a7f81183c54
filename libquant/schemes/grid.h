// The per-group grid of a weight scheme, for quantizers that choose the scales themselves
// (importance-weighted rounding, GPTQ; calib/). Each scheme's quantize (affine.cpp, int8.cpp,
// int4.cpp, bnb4.cpp) computes RTN parameters and codes in one pass; a SchemeGrid drives the same
// rounding as separate steps (the row's GridRule, scheme.h): fit a group's parameters, round one
// value to a code, the value a code dequantizes to, and pack codes + parameters into the scheme's
// PackedTensor. fit_rtn + code + pack is byte-identical to quantize_weights
// (tests/test_calibrated_quant.cpp).
//
// Codes and parameters per row (their GridRule):
//   affine    q in 0..2^bits−1,  value = q·scale + bias (MLX, products rounded to the dtype)
//   int8      q in −128..127,    value = q·scale
//   int8_ct   q in −128..127,    value = q·scale (in the dtype)
//   int4      q in −8..7 (stored u = q + 8), value = q·scale
//   nf4/fp4   q a table index,   value = table[q]·scale (scale = the block's absmax)
//   nvfp4     q an E2M1 code,    value = bf16(e2m1[q]·scale), scale = E4M3 / the tensor's global
//             scale (fixed per weight first: for_weight)
//   mxfp4     q an E2M1 code,    value = bf16(e2m1[q]·scale), scale a power of two (E8M0)
// Groups run along a row (group_size consecutive columns; 0 = the whole row). nf4/fp4 blocks run
// over the flattened tensor, so they are row groups only when the block size divides the row
// (fits() says so; calibrated quantizers need that).
#pragma once
#include <cstdint>
#include <vector>

#include "libquant/schemes/scheme.h"

namespace qt {

class SchemeGrid {
 public:
  explicit SchemeGrid(const SchemeParams& p);  // UserError for an unknown scheme

  const SchemeParams& params() const { return p_; }
  // This grid for one weight w [rows, cols]: rows with a tensor-level scale (nvfp4's global
  // scale) get it from w, as quantize_weights would, unless the params already carry one (a
  // global scale shared by fused projections); other rows are returned as they are. Fit, code
  // and pack a weight through the grid for_weight returned for it.
  SchemeGrid for_weight(const float* w, int64_t rows, int64_t cols) const;
  // Columns per group for a row of `cols` (group_size, or cols when group_size is 0).
  int64_t group_len(int64_t cols) const;
  // Whether groups of a [rows, cols] weight are whole runs of one row (always, except nf4/fp4
  // whose block size does not divide cols) and the scheme supports the shape (scheme_fits).
  bool fits(int64_t rows, int64_t cols, std::string* why = nullptr) const;

  // The scheme's own RTN parameters for the n values of one group, unrounded (as its quantize
  // codes with them).
  GroupParams fit_rtn(const float* v, int64_t n) const { return rule_->fit_rtn(v, n, p_); }
  // The parameters as stored (rounded to the dtypes of the layout's scales and biases): what
  // dequantize uses. A calibrated quantizer codes against stored() parameters so that code and
  // value agree.
  GroupParams stored(const GroupParams& g) const;
  // The scheme's rounding of x under g (the same function as its quantize).
  int code(float x, const GroupParams& g) const { return rule_->code(x, g, p_); }
  // The value code q dequantizes to under stored parameters g (as dequantize_weights).
  float value(int q, const GroupParams& g) const { return rule_->value(q, g, p_); }
  GridKind kind() const { return rule_->kind; }
  // The stored scales a weighted search tries for a group of absmax amax (GridRule::
  // scale_candidates; at most cap into out); 0 when the row has no such list.
  int scale_candidates(float amax, GroupParams* out, int cap) const {
    return rule_->scale_candidates ? rule_->scale_candidates(amax, p_, out, cap) : 0;
  }
  int qmin() const { return qmin_; }
  int qmax() const { return qmax_; }
  // Symmetric: the RTN scale's divisor of absmax.
  float top() const { return rule_->top; }

  // codes [rows, cols] and params [rows, n_groups] (stored() or not: they are rounded here)
  // into the scheme's packed tensors.
  PackedTensor pack(const int16_t* codes, const GroupParams* params, int64_t rows, int64_t cols) const;

 private:
  SchemeParams p_;
  const Scheme* row_ = nullptr;
  const GridRule* rule_ = nullptr;
  int qmin_ = 0, qmax_ = 0;
  DType scale_dtype_ = DType::F32, bias_dtype_ = DType::F32;
};

}  // namespace qt
