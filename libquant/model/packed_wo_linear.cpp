// PLACEHOLDER until the integer kernels land (replaced by the weight-only work).
#include "formats/error.h"
#include "libquant/model/packed_linear.h"
namespace qt {
std::unique_ptr<Linear> make_weight_only_linear(PackedTensor, const float*, const PackedLinearOptions&) {
  user_error("weight-only packed kernels are not built yet");
}
}  // namespace qt
