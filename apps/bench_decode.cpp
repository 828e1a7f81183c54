#include "apps/bench_decode.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "libquant/bench/decode_bench.h"
#include "libquant/bench/peak.h"
#include "libquant/cpu_features.h"
#include "libquant/kv/spec.h"
#include "libquant/model/llama.h"
#include "libquant/parallel.h"

namespace qt {

nlohmann::json run_bench_decode(const DecodeBenchOptions& o) {
  if (o.model.empty()) user_error("bench --decode needs --model");
  if (o.prompt <= 0) user_error("--prompt: must be positive, got {}", o.prompt);
  if (o.gen < 0) user_error("--gen: must be at least 0, got {}", o.gen);
  if (o.ubatch <= 0) user_error("--ubatch: must be positive, got {}", o.ubatch);
  if (o.compute != "f32" && o.compute != "bf16")
    user_error("--compute: f32 or bf16 with --decode, got '{}'", o.compute);
  if (!std::filesystem::is_regular_file(o.text)) user_error("{}: no such file (--text)", o.text);
  const auto t_start = std::chrono::steady_clock::now();

  Checkpoint ck = load_checkpoint(o.model, LoadMode::Native);  // GGUF blocks stay as stored
  if (!ck.tokenizer) user_error("{}: the checkpoint has no tokenizer", o.model);
  const ModelConfig cfg = ck.config;
  const int ctx = o.prompt + o.gen;
  if (cfg.max_position > 0 && ctx > cfg.max_position)
    user_error("--prompt + --gen = {}: larger than the model's context of {} positions", ctx, cfg.max_position);
  // The prompt: the first tokens of the text (a prefix long enough to hold them is tokenized).
  MappedFile mf = map_file(o.text);
  const std::string_view all(reinterpret_cast<const char*>(mf.data), mf.size);
  std::vector<int32_t> ids;
  for (size_t take = size_t(o.prompt) * 16;; take *= 2) {
    ids = ck.tokenizer->encode(std::string(all.substr(0, take)), true);
    if (int(ids.size()) > o.prompt || take >= all.size()) break;
  }
  if (int(ids.size()) < o.prompt) user_error("{}: {} tokens, fewer than --prompt {}", o.text, ids.size(), o.prompt);
  ids.resize(size_t(o.prompt));

  kv::KVConfig kc =
      kv::uniform_kv_config(cfg.n_layers, kv::parse_kv_spec(o.kv_k, "--kv-k"), kv::parse_kv_spec(o.kv_v, "--kv-v"));
  kc.artifacts = o.artifacts;
  PackedLinearOptions lo;
  lo.compute = o.compute == "bf16" ? Compute::BF16 : Compute::F32;
  lo.weight_act = weight_act_from_flag(o.weight_act);
  LlamaModel model(std::move(ck), checkpoint_linear_factory(ck, lo));
  auto cache = model.make_cache(ctx, kc);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

  const bench::DecodeResult r = bench::run_decode(model, *cache, ids, o.gen, o.ubatch);
  // What one decoded token reads: the weights (token_weight_bytes) and the KV cache at the mean
  // decode position; the memory read bandwidth, measured now at the same threads, bounds the rate.
  const double w_bytes = double(model.token_weight_bytes());
  const double kv_bytes = cache->bytes_per_token() * (r.prompt + 0.5 * std::max(r.gen - 1, 0));
  const double bw = bench::peak_mem_read(num_threads()).at(num_threads());
  const double bound_tps = bw > 0 ? bw * 1e9 / (w_bytes + kv_bytes) : 0.0;
  const double pct_bound = bound_tps > 0 ? 100.0 * r.decode_tps() / bound_tps : 0.0;
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const double rss_mib = double(ru.ru_maxrss) / 1024.0;

  fmt::print("model          {} ({}, {} layers, {:.1f}M params), linears {}\n", o.model, cfg.arch, cfg.n_layers,
             double(cfg.n_params()) / 1e6, model.linear_kind());
  fmt::print("kv cache       {}, {:.1f} bytes per token\n", kc.describe(), cache->bytes_per_token());
  fmt::print("prefill        {} tokens in {:.3f} s: {:.1f} tok/s (batches of {})\n", r.prompt, r.prefill_s,
             r.prefill_tps(), o.ubatch);
  fmt::print("decode         {} tokens in {:.3f} s: {:.2f} tok/s (positions {}..{}, greedy)\n", r.gen, r.decode_s,
             r.decode_tps(), r.prompt, ctx - 1);
  fmt::print(
      "bandwidth      {:.1f} MB of weights + {:.1f} MB of KV cache a token; memory read {:.1f} GB/s allows "
      "{:.2f} tok/s: decode at {:.1f}%\n",
      w_bytes / 1e6, kv_bytes / 1e6, bw, bound_tps, pct_bound);
  fmt::print("threads        {}, kernel {}; load {:.2f} s; peak RSS {:.1f} MiB\n", num_threads(),
             kernel_level_name(kernel_level()), load_s, rss_mib);
  return {{"model", o.model},
          {"arch", cfg.arch},
          {"linear_kind", model.linear_kind()},
          {"kv_cache", kc.describe()},
          {"kv_bytes_per_token", cache->bytes_per_token()},
          {"prompt", r.prompt},
          {"gen", r.gen},
          {"ubatch", o.ubatch},
          {"prefill_seconds", r.prefill_s},
          {"prefill_tokens_per_second", r.prefill_tps()},
          {"decode_seconds", r.decode_s},
          {"decode_tokens_per_second", r.decode_tps()},
          {"generated", r.generated},
          {"weight_bytes_per_token", w_bytes},
          {"kv_bytes_per_token_read", kv_bytes},
          {"mem_read_gbps", bw},
          {"bandwidth_bound_tokens_per_second", bound_tps},
          {"pct_bandwidth_bound", pct_bound},
          {"threads", num_threads()},
          {"kernel_level", kernel_level_name(kernel_level())},
          {"load_seconds", load_s},
          {"peak_rss_mib", rss_mib}};
}

}  // namespace qt
