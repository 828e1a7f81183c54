// make_kv_cache: the cache a KVConfig describes, the one place that picks among the dense cache
// (cache.cpp), the quantized one (quant_cache.cpp) and key centering around either (key_center.h).
#include <memory>
#include <string>

#include "formats/error.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/key_center.h"
#include "libquant/kv/spec.h"

namespace qt {

std::unique_ptr<KVCache> make_kv_cache(const kv::KVConfig& config, const KVShape& shape) {
  const std::string fp = config.uniform_full_precision();
  // Attention sinks (gpt_oss): a key shift would move every key's score against the fixed sink
  // logit, so centering (which relies on the softmax ignoring a per-query constant) cannot honour them.
  if (!shape.sinks.empty() && config.key_center)
    user_error("kv cache: key centering cannot honour gpt_oss's attention sinks");
  const DenseKv dense = fp == "f16" ? DenseKv::F16 : fp == "bf16" ? DenseKv::BF16 : DenseKv::F32;
  std::unique_ptr<KVCache> c = !fp.empty() ? make_f32_kv_cache(shape, dense) : make_quant_kv_cache(shape, config);
  if (config.key_center) return kv::make_key_centered_cache(std::move(c), config.key_center);
  return c;
}

std::unique_ptr<KVCache> make_kv_cache(const std::string& method, const KVShape& shape) {
  const kv::KVSpec s = kv::parse_kv_spec(method, "--kv");
  return make_kv_cache(kv::uniform_kv_config(shape.n_layers, s, s), shape);
}

}  // namespace qt
