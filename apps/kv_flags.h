// The CPU options every model-running subcommand (eval-ppl, generate) reads the same way:
// --threads / --kernel, and the KV cache flags (--kv or --kv-k/--kv-v, --kv-recipe, --kv-residual,
// --kv-mode, --artifacts, --kv-seed, --kv-key-center) turned into a checked kv::KVConfig.
#pragma once
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "formats/model_config.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/spec.h"

namespace qt {

struct KvFlags {
  std::string kv, kv_k, kv_v, recipe, mode = "cache", artifacts, key_center;
  int residual = -1;
  uint64_t seed = 42;
};

// Adds the KV flags above to `sub`.
void add_kv_flags(CLI::App& sub, KvFlags& f);

// --threads (0: all cores) and --kernel ("" : the best this CPU has); UserError when out of range.
void apply_cpu_flags(int threads, const std::string& kernel);

// A KV shape of `cfg` for checking a configuration (one position).
KVShape probe_kv_shape(const ModelConfig& cfg);

// The cache configuration the flags give for `cfg` ("f32" when none), its methods, bits and
// artifacts checked by building a cache. UserError for conflicting or bad flags.
kv::KVConfig kv_config_from_flags(const KvFlags& f, const ModelConfig& cfg);

}  // namespace qt
