// make_packed_linear: the scheme row's kernel family picks the kernels.
#include "libquant/linear/packed_linear.h"

#include <stdexcept>
#include <vector>

#include "formats/error.h"
#include "libquant/schemes/packed_values.h"

namespace qt {

void Linear::dequantize_row(int64_t, float*) const {
  throw std::logic_error("dequantize_row is not implemented for a " + kind() + " Linear");
}

void forward_shared_input(const Linear* const* ls, int count, const float* x, int64_t n, float* const* ys) {
  if (count > 0 && ls[0]->forward_shared(ls, count, x, n, ys)) return;
  for (int i = 0; i < count; ++i) ls[i]->forward(x, n, ys[i]);
}

RowSlice Linear::gemv_slice(const float*, int, int, float*) const {
  throw std::logic_error("gemv_slice is not implemented for a " + kind() + " Linear");
}

std::unique_ptr<Linear> make_packed_linear(PackedTensor w, const float* bias, const PackedLinearOptions& opt) {
  check_packed(w, "packed weight");
  const Scheme& row = find_scheme(w.params.scheme);
  if (row.kernel_form) w = row.kernel_form(std::move(w));
  switch (row.kernel) {
    case KernelFamily::Int8PerToken: return make_int_linear(std::move(w), bias, opt);
    case KernelFamily::Affine:
    case KernelFamily::CodeBook4: return make_weight_only_linear(std::move(w), bias, opt);
    case KernelFamily::Fp8PerToken: return make_fp8_linear(std::move(w), bias, opt);
    case KernelFamily::Dequantized: return make_dequantized_linear(std::move(w), bias, opt);
  }
  user_error("no packed kernel for scheme '{}'", row.name);
}

}  // namespace qt
