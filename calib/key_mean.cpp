#include "calib/key_mean.h"

#include <algorithm>

#include "formats/error.h"

namespace qt::calib {

kv::KeyCenter measure_key_mean(LlamaModel& model, const std::vector<int32_t>& tokens, int ctx, int chunks,
                               int32_t bos_id, int64_t* tokens_used) {
  const int n = int(std::min<int64_t>(chunks, int64_t(tokens.size()) / ctx));
  if (n <= 0) user_error("calibrate: the text has fewer than {} tokens, one chunk", ctx);
  kv::KeyMeanRecorder rec(model.kv_shape(ctx));
  std::vector<int32_t> chunk(static_cast<size_t>(ctx));
  for (int ci = 0; ci < n; ++ci) {
    rec.clear();
    std::copy(tokens.begin() + int64_t(ci) * ctx, tokens.begin() + int64_t(ci + 1) * ctx, chunk.begin());
    if (bos_id >= 0) chunk[0] = bos_id;
    model.forward_hidden(chunk.data(), ctx, 0, rec);
  }
  if (tokens_used) *tokens_used = rec.tokens();
  return rec.mean();
}

}  // namespace qt::calib
