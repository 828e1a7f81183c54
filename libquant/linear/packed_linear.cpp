// make_packed_linear: the scheme name picks the kernel family.
#include "libquant/linear/packed_linear.h"

#include <stdexcept>
#include <vector>

#include "formats/error.h"
#include "libquant/schemes/packed_values.h"

namespace qt {

void Linear::dequantize_row(int64_t, float*) const {
  throw std::logic_error("dequantize_row is not implemented for a " + kind() + " Linear");
}

RowSlice Linear::gemv_slice(const float*, int, int, float*) const {
  throw std::logic_error("gemv_slice is not implemented for a " + kind() + " Linear");
}

// compressed-tensors' W4A16 codes are mlx's 4-bit stream (u = q + 8, eight to a 32-bit word, LSB
// first): affine 4-bit with fp32 scales s and biases −8·s, the codes used in place. Its weights
// are the exact products s·(u − 8) (a bf16/f16 scale times a 4-bit code is exact in fp32), where
// compressed-tensors' decompress rounds them to the weights' dtype: within half an ulp of it
// (tests/test_packed_linear.cpp). Affine with bf16 scales would not do: like mlx it rounds s·u
// to bf16 before adding the bias.
PackedTensor int4_ct_as_affine(PackedTensor w) {
  const int64_t n = w.scales.numel();
  std::vector<float> s(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    s[size_t(i)] = schemes_detail::load_float(w.scales, size_t(i));
    b[size_t(i)] = -8.0f * s[size_t(i)];
  }
  const std::vector<int64_t> shape = w.scales.shape;
  w.scales = Tensor::from_f32(std::move(s), shape);
  w.biases = Tensor::from_f32(std::move(b), shape);
  w.data.dtype = DType::U32;
  w.params.scheme = "affine";
  w.params.dtype = DType::F32;
  check_packed(w, "int4_ct as affine");
  return w;
}

std::unique_ptr<Linear> make_packed_linear(PackedTensor w, const float* bias,
                                           const PackedLinearOptions& opt) {
  check_packed(w, "packed weight");
  const std::string& s = w.params.scheme;
  if (s == "int8" || s == "int8_ct" || s == "int4") return make_int_linear(std::move(w), bias, opt);
  if (s == "affine" || s == "nf4" || s == "fp4")
    return make_weight_only_linear(std::move(w), bias, opt);
  if (s == "int4_ct") return make_weight_only_linear(int4_ct_as_affine(std::move(w)), bias, opt);
  user_error("no packed kernel for scheme '{}'", s);
}

}  // namespace qt
