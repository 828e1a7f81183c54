// Internal to libquant/schemes: the rows each file defines, and small helpers they share (what code
// outside the folder needs of them is public in packed_values.h: round_to, load_float, group
// geometry, the bitsandbytes code tables).
#pragma once
#include <algorithm>
#include <cmath>
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
extern const Scheme kFp8;
extern const Scheme kFp8Block;
extern const Scheme kNvfp4;
extern const Scheme kNvfp4A4;
extern const Scheme kMxfp4;
extern const Scheme kMxfp4A4;

// max |v[i]| over n values (0 for n = 0); vectorized (an AVX2 clone), exact in any order.
float span_absmax(const float* v, int64_t n);

// A tensor being filled: bytes for `spec`, zeroed; finish() hands it over as a Tensor.
struct OutTensor {
  TensorSpec spec;
  std::shared_ptr<std::vector<uint8_t>> bytes;
  explicit OutTensor(const TensorSpec& s) : spec(s), bytes(pooled_zero_buffer(s.nbytes())) {}
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(bytes->data());
  }
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
inline PackedTensor finish_packed(const SchemeParams& p, int64_t rows, int64_t cols, OutTensor& data, OutTensor& scales,
                                  OutTensor* biases = nullptr) {
  PackedTensor t;
  t.params = p;
  t.rows = rows;
  t.cols = cols;
  t.data = data.finish();
  t.scales = scales.finish();
  if (biases) t.biases = biases->finish();
  return t;
}

// ---- Each row's rounding, defined once: its quantize (the fast per-group loops) and its
// GridRule (grid.h: GPTQ, importance-weighted fits) both call these.

// MLX affine dequantization of one code (affine.cpp; compiled without FMA contraction so that
// q·s and + b round separately, as MLX's separate multiply and add do).
float affine_dequant(uint32_t q, float scale, float bias, DType t);

// Cider's symmetric rows (int8, int4): s = absmax/top in fp32, a group of zeros gets s = 1; the
// code rint(x/s) (a true division, half to even) clamped to [lo, hi].
inline float cider_scale(float absmax, float top) {
  const float s = absmax / top;
  return s == 0.0f ? 1.0f : s;
}
inline float cider_code(float x, float s, float lo, float hi) {
  float q = std::rint(x / s);
  q = q < lo ? lo : q;
  return q > hi ? hi : q;
}

// torch.finfo(T).eps: compressed-tensors' replacement for a zero scale (int8_ct, int4_ct).
inline float dtype_eps(DType t) {
  switch (t) {
    case DType::BF16: return 0.0078125f;      // 2^-7
    case DType::F16: return 0.0009765625f;    // 2^-10
    default: return 1.1920928955078125e-07f;  // 2^-23
  }
}
// compressed-tensors' symmetric rows (int8_ct, int4_ct), all in the weights' dtype T:
// s = T(absmax / top) (top = (qmax − qmin)/2), a zero s → eps(T); the code rint(clamp(T(x/s),
// qmin, qmax)) (the quotient rounded to T before rint, as torch computes it); value T(q·s).
inline float ct_scale(float absmax, float top, DType T) {
  const float s = round_to(T, absmax / top);
  return s == 0.0f ? dtype_eps(T) : s;
}
inline float ct_code(float x, float s, DType T, float qmin, float qmax) {
  float y = round_to(T, x / s);
  y = y < qmin ? qmin : y;
  return std::rint(y > qmax ? qmax : y);
}
inline float ct_value(int q, float s, DType T) { return round_to(T, float(q) * s); }

// bitsandbytes blockwise 4-bit (bnb4.cpp), shared by the nf4 and fp4 rows: a code book and the
// midpoints of its sorted values. `order` maps the sorted position of a table value to its code
// (identity for NF4).
struct Bnb4Book {
  const float* table;
  const uint8_t* order;
  float mid[15];
  Bnb4Book(const float* table, const uint8_t* order);
};
// The sorted position of a value x already divided by the block's absmax: clamp to [−1, 1], then
// #{i : mid[i] < x} (torch.bucketize, right=False; a value on a midpoint takes the lower code).
inline int bnb4_position(float x, const float* mid) {
  x = x < -1.0f ? -1.0f : x;
  x = x > 1.0f ? 1.0f : x;
  int c = 0;
#pragma GCC unroll 15
  for (int k = 0; k < 15; ++k) c += mid[k] < x ? 1 : 0;
  return c;
}
// A full block's scale factor: x · (1 / max(absmax, 1e-38)).
inline float bnb4_inverse(float absmax) { return 1.0f / std::max(absmax, 1e-38f); }
inline float bnb4_value(const float* table, int code, float absmax, DType T) {
  return round_to(T, table[code] * absmax);
}

PackedLayout bnb4_layout(const SchemeParams& p, int64_t rows, int64_t cols);
PackedTensor bnb4_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p, const Bnb4Book& book);
void bnb4_dequantize(const PackedTensor& t, const float* table, float* out);
// The GridRule steps of a bitsandbytes row (blocks that divide the row: whole runs of one row).
GroupParams bnb4_fit_rtn(const float* v, int64_t n);
int bnb4_grid_code(float x, float absmax, const Bnb4Book& book);
void bnb4_pack_row(const int16_t* q, int64_t cols, uint8_t* dst);

// The row of a bitsandbytes 4-bit scheme (nf4.cpp, fp4.cpp): the two differ only in their code
// book (Table: the 16 values by code; Order: as Bnb4Book's) and their names.
template <const float* Table, const uint8_t* Order>
struct Bnb4Scheme {
  static const Bnb4Book& book() {
    static const Bnb4Book b(Table, Order);
    return b;
  }
  static PackedTensor quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p) {
    return bnb4_quantize(w, rows, cols, p, book());
  }
  static void dequantize(const PackedTensor& t, float* out) { bnb4_dequantize(t, Table, out); }
  static GroupParams fit_rtn(const float* v, int64_t n, const SchemeParams&) { return bnb4_fit_rtn(v, n); }
  static int grid_code(float x, const GroupParams& g, const SchemeParams&) {
    return bnb4_grid_code(x, g.scale, book());
  }
  static float value(int q, const GroupParams& g, const SchemeParams& p) {
    return bnb4_value(Table, q, g.scale, p.dtype);
  }
  static void pack_row(const int16_t* q, int64_t cols, const SchemeParams&, uint8_t* dst) {
    bnb4_pack_row(q, cols, dst);
  }
  static Scheme row(const char* name, const char* summary) {
    return {
        .name = name,
        .summary = summary,
        .bits = {4},
        .group_sizes = {64, 128},
        .default_bits = 4,
        .default_group_size = 64,
        .flat_blocks = true,
        .col_align = 1,
        .kernel = KernelFamily::CodeBook4,
        .kernel_form = nullptr,
        .grid = {GridKind::Table, 0, 15, 0.0f, Table, fit_rtn, grid_code, value, pack_row},
        .layouts = {{"bnb"}, {"native"}},
        .gguf = {{0, "iq4_nl"}},
        .layout = bnb4_layout,
        .quantize = quantize,
        .dequantize = dequantize,
    };
  }
};

// Symmetric groups: per row and group, s = scale(the group's absmax), stored to `scales` (in its
// dtype); then codes(v, n, s, first element's index) writes the group's codes.
template <class Scale, class Codes>
void symmetric_groups(const float* w, int64_t rows, int64_t cols, const SchemeParams& p, OutTensor& scales, Scale scale,
                      Codes codes) {
  const int64_t ng = n_groups(p, cols), gl = group_len(p, cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const float* v = w + r * cols + g * gl;
      const float s = scale(span_absmax(v, gl));
      codes(v, gl, s, r * cols + g * gl);
      scales.store_float(size_t(r * ng + g), s);
    }
}

// The fp8 rows' code of x under scale s in the weights' dtype T: e4m3(clamp(T(x/s) + 0, ±448)) (fp8.cpp).
uint8_t fp8_code(float x, float s, DType T);

// compressed-tensors' symmetric groups (int8_ct, int4_ct): s = ct_scale.
template <class Codes>
void ct_symmetric_groups(const float* w, int64_t rows, int64_t cols, const SchemeParams& p, float top,
                         OutTensor& scales, Codes codes) {
  symmetric_groups(
      w, rows, cols, p, scales, [&](float absmax) { return ct_scale(absmax, top, p.dtype); }, codes);
}

}  // namespace qt::schemes_detail
