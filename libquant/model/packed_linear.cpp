// make_packed_linear: the scheme name picks the kernel family.
#include "libquant/model/packed_linear.h"

#include <stdexcept>

#include "formats/error.h"

namespace qt {

void Linear::dequantize_row(int64_t, float*) const {
  throw std::logic_error("dequantize_row is not implemented for a " + kind() + " Linear");
}

RowSlice Linear::gemv_slice(const float*, int, int, float*) const {
  throw std::logic_error("gemv_slice is not implemented for a " + kind() + " Linear");
}

std::unique_ptr<Linear> make_packed_linear(PackedTensor w, const float* bias,
                                           const PackedLinearOptions& opt) {
  check_packed(w, "packed weight");
  const std::string& s = w.params.scheme;
  if (s == "int8" || s == "int8_ct" || s == "int4") return make_int_linear(std::move(w), bias, opt);
  if (s == "affine" || s == "nf4" || s == "fp4")
    return make_weight_only_linear(std::move(w), bias, opt);
  user_error("no packed kernel for scheme '{}'", s);
}

}  // namespace qt
