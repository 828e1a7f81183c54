// What the GPU forward (libquant/cuda/) does not run yet, refused before it is asked to: the
// mixture-of-experts FFN (qwen3_moe, mixtral) runs on the CPU only (LlamaModel::moe_ffn, libquant/model/llama.cpp).
#pragma once
#include "formats/checkpoint.h"
#include "formats/error.h"

namespace qt {

inline void refuse_moe_on_cuda(const Checkpoint& ck) {
  if (ck.config.is_moe())
    user_error("{}: {} is a mixture-of-experts model; --device cuda does not run those yet (use the CPU)", ck.path,
               ck.config.arch);
}

}  // namespace qt
