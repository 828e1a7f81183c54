// Internal to libquant/schemes: the rows each file defines, and small helpers they share (what code
// outside the folder needs of them is public in packed_values.h).
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/tensor.h"
#include "libquant/schemes/buffer_pool.h"
#include "libquant/schemes/packed_values.h"
#include "libquant/schemes/scheme.h"

namespace qt::schemes_detail {

// The rows (scheme.cpp lists them in scheme_table(); explicit references keep every object file
// of the static library linked).
extern const Scheme kAffine;
extern const Scheme kInt8;
extern const Scheme kInt8Ct;
extern const Scheme kInt4;
extern const Scheme kInt4Ct;
extern const Scheme kNf4;
extern const Scheme kFp4;

// max |v[i]| over n values (0 for n = 0); vectorized (an AVX2 clone), exact in any order.
float span_absmax(const float* v, int64_t n);

// A tensor being filled: bytes for `spec`, zeroed; finish() hands it over as a Tensor.
struct OutTensor {
  TensorSpec spec;
  std::shared_ptr<std::vector<uint8_t>> bytes;
  explicit OutTensor(const TensorSpec& s) : spec(s), bytes(pooled_zero_buffer(s.nbytes())) {}
  template <typename T> T* as() { return reinterpret_cast<T*>(bytes->data()); }
  // Store fp32 v rounded to the spec's float dtype at element i.
  void store_float(size_t i, float v) {
    switch (spec.dtype) {
      case DType::BF16: as<uint16_t>()[i] = f32_to_bf16(v); break;
      case DType::F16: as<uint16_t>()[i] = f32_to_f16(v); break;
      default: as<float>()[i] = v; break;
    }
  }
  Tensor finish() {
    Tensor t;
    t.dtype = spec.dtype;
    t.shape = spec.shape;
    t.data = bytes->data();
    t.nbytes = bytes->size();
    t.owner = std::move(bytes);
    return t;
  }
};

// The packed [rows, cols] weight made of a quantizer's finished outputs (biases: affine only).
inline PackedTensor finish_packed(const SchemeParams& p, int64_t rows, int64_t cols, OutTensor& data,
                                  OutTensor& scales, OutTensor* biases = nullptr) {
  PackedTensor t;
  t.params = p;
  t.rows = rows;
  t.cols = cols;
  t.data = data.finish();
  t.scales = scales.finish();
  if (biases) t.biases = biases->finish();
  return t;
}

// torch.finfo(T).eps: compressed-tensors' replacement for a zero scale (int8_ct, int4_ct).
inline float dtype_eps(DType t) {
  switch (t) {
    case DType::BF16: return 0.0078125f;     // 2^-7
    case DType::F16: return 0.0009765625f;   // 2^-10
    default: return 1.1920928955078125e-07f;  // 2^-23
  }
}

// MLX affine dequantization of one code (affine.cpp; compiled without FMA contraction so that
// q·s and + b round separately, as MLX's separate multiply and add do).
float affine_dequant(uint32_t q, float scale, float bias, DType t);

// bitsandbytes blockwise 4-bit (bnb4.cpp), shared by the nf4 and fp4 rows. `order` maps the
// sorted position of a table value to its code (identity for NF4).
PackedLayout bnb4_layout(const SchemeParams& p, int64_t rows, int64_t cols);
PackedTensor bnb4_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p,
                           const float* table, const uint8_t* order);
void bnb4_dequantize(const PackedTensor& t, const float* table, float* out);

// compressed-tensors' symmetric groups (int8_ct, int4_ct): per row and group, s = T(absmax / top)
// (top = (qmax − qmin)/2: 127.5, 7.5), a zero group's s = eps(T), stored to `scales`; then
// codes(v, n, s, first element's index) writes the group's codes.
template <class Codes>
void ct_symmetric_groups(const float* w, int64_t rows, int64_t cols, const SchemeParams& p, float top, OutTensor& scales,
                         Codes codes) {
  const int64_t ng = n_groups(p, cols), gl = group_len(p, cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const float* v = w + r * cols + g * gl;
      float s = round_to(p.dtype, span_absmax(v, gl) / top);
      if (s == 0.0f) s = dtype_eps(p.dtype);
      codes(v, gl, s, r * cols + g * gl);
      scales.store_float(size_t(r * ng + g), s);
    }
}

}  // namespace qt::schemes_detail
