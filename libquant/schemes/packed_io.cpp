// PLACEHOLDER until the quantized layouts land (replaced by the convert/layouts work).
#include "libquant/schemes/packed_io.h"

#include "formats/error.h"

namespace qt {

std::optional<PackedTensor> packed_weight(const Checkpoint& ck, const std::string& weight_name) {
  if (!ck.quantization.is_object() || ck.source_kind == "gguf") return std::nullopt;
  user_error("{}: {}: quantized folders are not readable yet", ck.path, weight_name);
}

}  // namespace qt
