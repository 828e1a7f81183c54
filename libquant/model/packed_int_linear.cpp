// PLACEHOLDER until the integer kernels land (replaced by the W8A8/W4A8 work).
#include "formats/error.h"
#include "libquant/model/packed_linear.h"
namespace qt {
std::unique_ptr<Linear> make_int_linear(PackedTensor, const float*, const PackedLinearOptions&) {
  user_error("integer packed kernels are not built yet");
}
}  // namespace qt
