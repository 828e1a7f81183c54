// The per-layer, per-kv-head mean of the keys (after RoPE, as the cache stores them) over
// calibration text, for key centering (libquant/kv/key_center.h).
#pragma once
#include <cstdint>
#include <vector>

#include "libquant/kv/key_center.h"
#include "libquant/model/llama.h"

namespace qt::calib {

// Chunks of `ctx` tokens (the first `chunks` of them, each starting with bos_id when ≥ 0) run
// through the model with a full-precision cache; every key of every position is averaged.
kv::KeyCenter measure_key_mean(LlamaModel& model, const std::vector<int32_t>& tokens, int ctx, int chunks,
                               int32_t bos_id, int64_t* tokens_used);

}  // namespace qt::calib
