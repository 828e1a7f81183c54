#include "apps/kv_flags.h"

#include "formats/error.h"
#include "libquant/cpu_features.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/key_center.h"
#include "libquant/math/ops.h"
#include "libquant/parallel.h"

namespace qt {

void add_kv_flags(CLI::App& sub, KvFlags& f) {
  sub.add_option("--kv", f.kv, "KV cache method for keys and values (f32, f16, bf16, METHOD[:k=v,...])");
  sub.add_option("--kv-k", f.kv_k, "KV method of the keys, METHOD[:bits=B,...] (" + kv::kv_method_names() + ")");
  sub.add_option("--kv-v", f.kv_v, "KV method of the values");
  sub.add_option("--kv-recipe", f.recipe, "per-layer KV methods (JSON, from calibrate --method kv-sensitivity)");
  sub.add_option("--kv-key-center", f.key_center,
                 "store keys minus these per-head means (calibrate --method key-mean); attention is unchanged, "
                 "the quantized keys are smaller");
  sub.add_option("--kv-residual", f.residual, "full-precision window of the newest tokens (default: per method)");
  sub.add_option("--kv-mode", f.mode, "cache (ubatch written, then read) or decode (token-by-token view)")
      ->check(CLI::IsMember({"cache", "decode"}));
  sub.add_option("--artifacts", f.artifacts, "precompute folder: rotations, JL matrices, codebooks");
  sub.add_option("--kv-seed", f.seed, "seed of the rotations and JL matrices (default 42)");
}

void apply_cpu_flags(int threads, const std::string& kernel) {
  if (threads < 0) user_error("--threads: must be positive, got {}", threads);
  if (threads > 0) set_threads(threads);
  if (kernel.empty()) return;
  KernelLevel lvl;
  if (!parse_kernel_level(kernel, &lvl)) user_error("--kernel: '{}' is not one of scalar, avx2, avx512, amx", kernel);
  if (lvl > max_kernel_level())
    user_error("--kernel {}: this CPU supports at most {}", kernel, kernel_level_name(max_kernel_level()));
  set_kernel_level(lvl);
}

KVShape probe_kv_shape(const ModelConfig& cfg) {
  KVShape s;
  s.n_layers = cfg.n_layers, s.n_heads = cfg.n_heads, s.n_kv_heads = cfg.n_kv_heads, s.head_dim = cfg.head_dim;
  s.max_ctx = 1, s.scale = 1;
  s.rope_inv_freq = ops::RopeTable(cfg).inv_freq();  // codecs of pre-RoPE keys (commvq) need it
  return s;
}

kv::KVConfig kv_config_from_flags(const KvFlags& f, const ModelConfig& cfg) {
  if (!f.kv.empty() && (!f.kv_k.empty() || !f.kv_v.empty()))
    user_error("--kv sets keys and values together; give it or --kv-k/--kv-v, not both");
  if (!f.recipe.empty() && (!f.kv.empty() || !f.kv_k.empty() || !f.kv_v.empty()))
    user_error("--kv-recipe gives every layer's methods; drop --kv/--kv-k/--kv-v");
  if (f.residual < -1) user_error("--kv-residual: must be at least 0, got {}", f.residual);
  const std::string both = f.kv.empty() ? "f32" : f.kv;
  kv::KVConfig c = f.recipe.empty() ? kv::uniform_kv_config(cfg.n_layers,
                                                            kv::parse_kv_spec(f.kv_k.empty() ? both : f.kv_k, "--kv-k"),
                                                            kv::parse_kv_spec(f.kv_v.empty() ? both : f.kv_v, "--kv-v"))
                                    : kv::read_kv_recipe(f.recipe, cfg.n_layers);
  c.residual = f.residual;
  c.mode = f.mode == "decode" ? kv::KVMode::Decode : kv::KVMode::Cache;
  c.artifacts = f.artifacts;
  c.seed = f.seed;
  const KVShape s = probe_kv_shape(cfg);
  if (!f.key_center.empty()) c.key_center = kv::load_key_center(f.key_center, s);
  make_kv_cache(c, s);
  return c;
}

}  // namespace qt
