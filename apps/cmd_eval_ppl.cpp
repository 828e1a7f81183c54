// quanttool eval-ppl --model PATH --text FILE: perplexity (llama.cpp's or the GPTQ papers'
// protocol, libquant/eval/perplexity.h) and, with --kl-base-model, the KL divergence against a
// baseline model run alongside in the same process.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "apps/command.h"
#include "apps/kv_flags.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "libquant/cpu_features.h"
#include "libquant/cuda/backend.h"
#include "libquant/cuda/device_list.h"
#include "libquant/eval/perplexity.h"
#include "libquant/eval/ppl_parts.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/key_center.h"
#include "libquant/kv/kv_stats.h"
#include "libquant/model/llama.h"
#include "libquant/math/ops.h"
#include "libquant/parallel.h"

namespace qt {
namespace cmd_eval_ppl {

using nlohmann::json;

struct Options {
  std::string model, text, method = "llama", compute, weight_act, device = "cpu", kernel, json_path, kl_base,
                           kl_base_kv = "f32", kl_base_cache, attention = "fused";
  int ctx = 0, chunks = -1, chunk_offset = 0, threads = 0, ubatch = 0, batch = 0, chunk_parallel = 0;
  KvFlags kvf;
  bool running = false, token_stats = false, kv_stats = false;
  std::vector<std::string> merge;
};

// Bytes of the tensors as stored in the source (GGUF: the quantized blocks), for bits/weight.
uint64_t source_tensor_bytes(const Checkpoint& ck) {
  uint64_t b = 0;
  if (ck.source_kind == "gguf" && ck.quantization.is_object() && ck.quantization.contains("tensors")) {
    for (auto& [name, t] : ck.quantization["tensors"].items()) b += t.value("nbytes", uint64_t(0));
    return b;
  }
  for (auto& [name, t] : ck.tensors) b += t.nbytes;
  return b;
}

std::string read_text(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) user_error("{}: no such file", path);
  if (std::filesystem::file_size(path) == 0) user_error("{}: the text is empty", path);
  MappedFile mf = map_file(path);
  return std::string(reinterpret_cast<const char*>(mf.data), mf.size);
}

std::string duration(double s) {
  if (s < 0 || !std::isfinite(s)) return "?";
  int t = int(s + 0.5);
  return t >= 3600 ? fmt::format("{}h{:02}m{:02}s", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}m{:02}s", t / 60, t % 60);
}

// --kl-base-cache FILE: the KL baseline's hidden states at the scored rows (PplOptions::base_hidden),
// kept between runs against the same baseline. The file: one line of JSON naming what they belong
// to (the baseline and text by path, size and modification time; the chunks; the baseline's cache),
// then the floats. A file that names anything else is recomputed and overwritten.
std::string file_stamp(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::string s = fs::absolute(path).lexically_normal().string();
  for (const fs::path& f : files)
    s += fmt::format(";{}:{}:{}", f.filename().string(), fs::file_size(f),
                     fs::last_write_time(f).time_since_epoch().count());
  return s;
}

json base_cache_key(const Options& o, const ChunkPlan& plan, const PplOptions& po, int hidden) {
  return json{{"kl_base_model", file_stamp(o.kl_base)},
              {"text", file_stamp(o.text)},
              {"method", o.method},
              {"ctx", plan.ctx},
              {"first_chunk", plan.first_chunk},
              {"n_chunks", plan.n_chunks},
              {"first", plan.first},
              {"n_scored", plan.n_scored},
              {"bos_id", po.bos_id},
              {"kl_base_kv", po.base_kv},
              {"hidden", hidden}};
}

// The kept floats when `path` holds them for `key`; empty otherwise.
std::vector<float> read_base_cache(const std::string& path, const json& key) {
  if (!std::filesystem::is_regular_file(path)) return {};
  const MappedFile mf = map_file(path);
  const char* p = reinterpret_cast<const char*>(mf.data);
  const char* nl = static_cast<const char*>(std::memchr(p, '\n', mf.size));
  if (!nl) return {};
  const json got = json::parse(std::string(p, nl), nullptr, false);
  if (got != key) return {};
  const size_t n = size_t(key["n_chunks"].get<int>()) * key["n_scored"].get<int>() * key["hidden"].get<int>();
  const size_t off = size_t(nl - p) + 1;
  if (mf.size - off != n * sizeof(float)) return {};
  std::vector<float> v(n);
  std::memcpy(v.data(), mf.data + off, n * sizeof(float));
  return v;
}

void write_base_cache(const std::string& path, const json& key, const std::vector<float>& v) {
  std::string bytes = key.dump() + "\n";
  bytes.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  write_file_atomic(path, bytes.data(), bytes.size());
}

// --merge: one JSON from the parts of a split run (ppl_parts.h), printed like a run's summary.
// What both paths (CPU, --device cuda) report of a finished run: the figures, the --running
// line, and the JSON fields they share (each path adds its own).
struct RunFacts {
  double wall = 0, rss_mib = 0, bpw = 0, tps = 0;
  int64_t n_params = 0;
};

RunFacts run_facts(const ModelConfig& cfg, const PplResult& r, uint64_t src_bytes,
                   std::chrono::steady_clock::time_point t_start) {
  RunFacts f;
  f.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  f.rss_mib = double(ru.ru_maxrss) / 1024.0;
  f.n_params = cfg.n_params();
  f.bpw = f.n_params > 0 ? 8.0 * double(src_bytes) / double(f.n_params) : 0;
  f.tps = r.seconds > 0 ? double(r.tokens_evaluated) / r.seconds : 0;
  return f;
}

void print_running(const Options& o, const PplResult& r) {
  if (!o.running) return;
  std::string line;
  for (size_t i = 0; i < r.running.size(); ++i) line += fmt::format("[{}]{:.4f},", i + 1, r.running[i]);
  fmt::print("{}\n", line);
}

json result_json(const Options& o, const ModelConfig& cfg, const PplResult& r, const RunFacts& f, uint64_t src_bytes,
                 const std::string& compute, size_t compute_bytes, double load_s, bool bos_per_chunk) {
  json j = ppl_result_json(r);
  j["model"] = o.model;
  j["text"] = o.text;
  j["arch"] = cfg.arch;
  j["n_params"] = f.n_params;
  j["model_bytes"] = src_bytes;
  j["bits_per_weight"] = f.bpw;
  j["compute"] = compute;
  j["compute_weight_bytes"] = compute_bytes;
  j["kv"] = r.kv_name;
  j["wall_seconds"] = f.wall;
  j["load_seconds"] = load_s;
  j["peak_rss_mib"] = f.rss_mib;
  j["bos_per_chunk"] = bos_per_chunk;
  return j;
}

int merge(const Options& o) {
  if (!o.model.empty() || !o.text.empty()) user_error("--merge reads finished parts; drop --model and --text");
  if (o.json_path.empty()) user_error("--merge needs --json FILE for the merged result");
  std::vector<json> parts;
  for (const std::string& f : o.merge) {
    if (!std::filesystem::is_regular_file(f)) user_error("{}: no such file", f);
    try {
      parts.push_back(json::parse(read_text(f)));
    } catch (const json::exception& e) {
      user_error("{}: not JSON ({})", f, e.what());
    }
  }
  const json m = merge_ppl_parts(std::move(parts), o.merge);
  fmt::print("merged         {} parts, {} chunks, {} tokens scored\n", o.merge.size(), m["chunks"].get<int>(),
             m["tokens_scored"].get<int64_t>());
  fmt::print("PPL            {:.4f} ± {:.5f}\n", m["ppl"].get<double>(), m["ppl_err"].get<double>());
  if (m.contains("kld"))
    fmt::print("KLD            {:.6f} ± {:.6f}\n", m["kld"]["kld_mean"].get<double>(),
               m["kld"]["kld_err"].get<double>());
  const std::string s = m.dump(2) + "\n";
  write_file_atomic(o.json_path, s.data(), s.size());
  return 0;
}

// What the GPU does not run is refused before any loading, one line and exit 2 — never run on
// the CPU instead.
void check_cuda_flags(const Options& o) {
  if (!cuda::built()) cuda::device_info();  // the one-line "built without CUDA" error
  auto not_yet = [](const std::string& what) { user_error("{}: not on cuda yet", what); };
  if (!o.compute.empty() && o.compute != "bf16") not_yet("--compute " + o.compute + " (cuda computes in bf16)");
  if (!o.kernel.empty()) user_error("--kernel picks a CPU kernel level; it has no meaning with --device cuda");
  if (!o.weight_act.empty()) not_yet("--weight-act");
  if (o.kl_base_kv != "f32" && o.kl_base_kv != "f16")
    not_yet("--kl-base-kv " + o.kl_base_kv + " (cuda keeps f16 caches)");
  if (!o.kvf.recipe.empty()) not_yet("--kv-recipe");
  if (!o.kvf.key_center.empty()) not_yet("--kv-key-center");
  if (o.kv_stats) not_yet("--kv-stats");
  if (!o.kl_base_cache.empty()) not_yet("--kl-base-cache");
  if (o.kvf.mode != "cache" && o.kvf.mode != "decode") user_error("--kv-mode {}: cache or decode", o.kvf.mode);
  for (const std::string* kv :
       {&o.kvf.kv, &o.kvf.kv_k, &o.kvf.kv_v}) {  // the rest is checked with the model's head_dim
    const std::string m = kv->empty() ? "f16" : kv::parse_kv_spec(*kv, "--kv").method;
    if (!kv::kv_method_on_cuda(m)) not_yet("--kv " + *kv + " (cuda runs " + kv::cuda_kv_method_names() + ")");
  }
  if (o.batch < 0) user_error("--batch: must be positive, got {}", o.batch);
  if (o.chunk_parallel != 0)
    user_error("--chunk-parallel: chunks side by side on the CPU's threads; on cuda, --batch chunks share a forward");
  const int ctx = o.ctx > 0 ? o.ctx : (o.method == "chunks" ? 2048 : 512);
  if (o.ubatch > 0 && o.ubatch < ctx) not_yet("--ubatch " + std::to_string(o.ubatch) + " (cuda runs whole chunks)");
}

// The models on the chosen device and the scorer that runs them (perplexity.h's ChunkScorer).
struct Engine {
  std::unique_ptr<LlamaModel> cpu, cpu_base;
  std::unique_ptr<cuda::GpuModel> gpu, gpu_base;
  std::unique_ptr<ChunkScorer> scorer;
  int batch = 1;  // chunks per forward
  std::string compute() const { return gpu ? gpu->kind() : cpu->linear_kind(); }
  size_t weight_bytes() const { return gpu ? gpu->weight_bytes() : cpu->weight_bytes(); }
  const ModelConfig& base_config() const { return gpu_base ? gpu_base->config() : cpu_base->config(); }
};

int run(const Options& o) {
  if (!o.merge.empty()) return merge(o);
  if (o.model.empty() || o.text.empty()) user_error("eval-ppl needs --model and --text (or --merge PARTS)");
  if (!o.kl_base_cache.empty() && o.kl_base.empty())
    user_error("--kl-base-cache keeps the --kl-base-model's states; give both");
  const bool on_gpu = cuda::is_cuda_device(o.device);
  if (!on_gpu && o.device != "cpu") user_error("--device {}: cpu, cuda, cuda:N or cuda:N,M,…", o.device);
  if (!on_gpu && o.attention != "fused") user_error("--attention {}: cuda only (with --device cuda)", o.attention);
  if (on_gpu)
    check_cuda_flags(o);
  else if (o.batch != 0)
    user_error("--batch: chunks per GPU forward; on the CPU, --chunk-parallel runs chunks side by side");
  if (o.chunk_parallel < 0) user_error("--chunk-parallel: must be positive, got {}", o.chunk_parallel);
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  apply_cpu_flags(o.threads, on_gpu ? "" : o.kernel);
  PplOptions po;
  po.method = o.method == "chunks" ? PplMethod::Chunks : PplMethod::Llama;
  po.ctx = o.ctx > 0 ? o.ctx : (po.method == PplMethod::Chunks ? 2048 : 512);
  if (o.ctx < 0) user_error("--ctx: must be positive, got {}", o.ctx);
  po.max_chunks = o.chunks;
  po.first_chunk = o.chunk_offset;
  po.keep_tokens = o.token_stats;
  if (o.token_stats && o.json_path.empty()) user_error("--token-stats writes into the JSON; give --json FILE");
  if (o.ubatch < 0) user_error("--ubatch: must be positive, got {}", o.ubatch);
  po.ubatch = o.ubatch > 0 ? o.ubatch : on_gpu ? 0 : 512;
  po.base_kv = o.kl_base_kv;
  po.chunk_parallel = o.chunk_parallel;
  const Compute compute = o.compute == "bf16" ? Compute::BF16 : Compute::F32;
  std::optional<cuda::DeviceInfo> dev;
  std::vector<int> devices;
  if (on_gpu) {
    devices = cuda::parse_device_list(o.device);
    dev = cuda::device_info(devices[0]);
    if (devices.size() > 1 && !o.kl_base.empty()) user_error("--kl-base-model on several devices: not on cuda yet");
    for (const std::string* kv : {&o.kvf.kv, &o.kvf.kv_k, &o.kvf.kv_v})  // the pipeline keeps the f16 cache
      if (devices.size() > 1 && !kv->empty() && *kv != "f16")
        user_error("--kv {} on several devices: not on cuda yet", *kv);
  }

  const std::string text = read_text(o.text);
  // On the CPU a GGUF's projections compute from their blocks (LoadMode::Native, ggml_linear.h).
  const LoadMode mode = on_gpu ? LoadMode::Eager : LoadMode::Native;
  Checkpoint ck = load_checkpoint(o.model, mode);
  if (!ck.tokenizer) user_error("{}: the checkpoint has no tokenizer", o.model);
  // What the GPU forward does not run (some layouts, mixed dense and quantized projections) is
  // refused here, before tokenizing: one "not on cuda yet" line.
  if (on_gpu) cuda::check_supported(ck);
  const ModelConfig cfg = ck.config;
  if (on_gpu) {  // the KV cache on the GPU: f16 (the default), or a method cuda runs (libquant/cuda/kv.h)
    const std::string both = o.kvf.kv.empty() ? "f16" : o.kvf.kv;
    po.kv = kv::uniform_kv_config(cfg.n_layers, kv::parse_kv_spec(o.kvf.kv_k.empty() ? both : o.kvf.kv_k, "--kv-k"),
                                  kv::parse_kv_spec(o.kvf.kv_v.empty() ? both : o.kvf.kv_v, "--kv-v"));
    po.kv.residual = o.kvf.residual;
    po.kv.mode = o.kvf.mode == "decode" ? kv::KVMode::Decode : kv::KVMode::Cache;
    po.kv.artifacts = o.kvf.artifacts;
    po.kv.seed = o.kvf.seed;
    cuda::check_kv(po.kv, cfg.head_dim, ops::RopeTable(cfg).inv_freq());
  } else {  // the KV configuration, checked (methods, bits, artifacts) before any long work
    po.kv = kv_config_from_flags(o.kvf, cfg);
    if (o.kv_stats) {
      if (!po.kv.uniform_full_precision().empty())
        user_error("--kv-stats compares a quantized cache with the exact K/V; the cache here is {}",
                   po.kv.uniform_full_precision());
      po.kv.stats = std::make_shared<kv::KVStats>(cfg.n_layers);
    }
    make_kv_cache(po.base_kv, probe_kv_shape(cfg));
  }
  if (cfg.max_position > 0 && po.ctx > cfg.max_position)
    user_error("--ctx {}: larger than the model's context of {} positions", po.ctx, cfg.max_position);
  const std::vector<int32_t> ids = ck.tokenizer->encode(text, true);
  if (ids.empty()) user_error("{}: the text has no tokens", o.text);
  if (po.method == PplMethod::Llama && ck.tokenizer->add_bos()) po.bos_id = ck.tokenizer->bos_id();
  const ChunkPlan plan = plan_chunks(po.method, po.ctx, int64_t(ids.size()), po.max_chunks, po.first_chunk);
  if (plan.n_chunks == 0) user_error("--chunks 0: nothing to evaluate");

  Engine e;
  if (!o.kl_base.empty()) {
    Checkpoint bk = load_checkpoint(o.kl_base, mode);
    check_kl_baseline(ck.config, bk.config, o.kl_base, ids, ids);  // shapes and vocabulary first
    if (!bk.tokenizer) user_error("{}: the checkpoint has no tokenizer", o.kl_base);
    check_kl_baseline(ck.config, bk.config, o.kl_base, ids, bk.tokenizer->encode(text, true));
    if (on_gpu) {  // the baseline on the GPU too, in its own layout (bf16 for a dense one)
      cuda::check_supported(bk);
      e.gpu_base = std::make_unique<cuda::GpuModel>(std::move(bk), o.attention == "fused", devices);
    } else {  // the reference runs in fp32 (from its packed codes, if it is a quantized folder)
      e.cpu_base = std::make_unique<LlamaModel>(std::move(bk), checkpoint_linear_factory(bk, {}));
    }
  }
  const uint64_t src_bytes = source_tensor_bytes(ck);
  if (on_gpu) {
    e.gpu = std::make_unique<cuda::GpuModel>(std::move(ck), o.attention == "fused", devices);
    cuda::set_kv(*e.gpu, po.kv);  // before auto_batch: decode windows take more attention scratch
    e.batch = o.batch > 0          ? o.batch
              : devices.size() > 1 ? cuda::pipeline_micro_batch(*e.gpu, po.ctx, plan.n_chunks)
                                   : cuda::auto_batch(*e.gpu, po.ctx);
    if (e.gpu_base && o.batch == 0) e.batch = std::max(1, std::min(e.batch, cuda::auto_batch(*e.gpu_base, po.ctx)) / 2);
    e.scorer = cuda::make_scorer(*e.gpu, e.batch, e.gpu_base.get());
  } else {
    PackedLinearOptions lo;
    lo.compute = compute;
    lo.weight_act = weight_act_from_flag(o.weight_act);
    // Quantized folders compute from their packed codes; releases ck's tensors as it goes.
    e.cpu = std::make_unique<LlamaModel>(std::move(ck), checkpoint_linear_factory(ck, lo));
    e.scorer = make_cpu_scorer(*e.cpu, e.cpu_base.get());
  }
  // Start to model ready: reading, tokenizing, packing (the KL baseline's too, when given).
  const double load_s = std::chrono::duration<double>(clock::now() - t_start).count();

  const bool tty = isatty(fileno(stderr));
  ProgressFn progress = [&](const ChunkProgress& p) {
    if (!tty) return;
    const double tps = p.seconds > 0 ? double(p.tokens) / p.seconds : 0;
    const double eta = tps > 0 ? double(int64_t(p.n_chunks - p.chunk) * plan.ctx) / tps : 0;
    std::fprintf(stderr, "\r\033[Kchunk %d/%d  %.0f tok/s  ETA %s  PPL %.4f", p.chunk, p.n_chunks, tps,
                 duration(eta).c_str(), p.ppl);
    if (p.chunk == p.n_chunks) std::fputc('\n', stderr);
    std::fflush(stderr);
  };
  std::vector<float> base_hidden;
  json cache_key;
  bool cache_read = false;
  if (!o.kl_base_cache.empty()) {
    cache_key = base_cache_key(o, plan, po, e.base_config().hidden);
    base_hidden = read_base_cache(o.kl_base_cache, cache_key);
    cache_read = !base_hidden.empty();
    po.base_hidden = &base_hidden;
  }
  const PplResult r = evaluate_perplexity(*e.scorer, ids, po, progress);
  if (!o.kl_base_cache.empty() && !cache_read) write_base_cache(o.kl_base_cache, cache_key, base_hidden);

  const RunFacts f = run_facts(cfg, r, src_bytes, t_start);
  print_running(o, r);
  fmt::print("model          {} ({}, {} layers, {:.1f}M params)\n", o.model, cfg.arch, cfg.n_layers, f.n_params / 1e6);
  fmt::print("weights        {} bytes as stored, {:.3f} bits per weight; compute {}{}\n", src_bytes, f.bpw, e.compute(),
             on_gpu ? fmt::format(" on cuda ({} bytes on the GPU)", e.weight_bytes())
                    : fmt::format(" ({} bytes packed)", e.weight_bytes()));
  if (dev) fmt::print("device         {}: {}\n", o.device, dev->describe());
  if (devices.size() > 1)
    fmt::print("stages         {} (micro-batches of {} chunks pipelined)\n", e.gpu->describe_stages(), e.batch);
  fmt::print("text           {} ({} tokens{})\n", o.text, ids.size(), po.bos_id >= 0 ? ", BOS per chunk" : "");
  fmt::print("method         {}, ctx {}, {} chunks{}, {} scored per chunk{}\n", ppl_method_name(r.method), plan.ctx,
             plan.n_chunks, plan.first_chunk > 0 ? fmt::format(" from chunk {}", plan.first_chunk) : std::string(),
             plan.n_scored, on_gpu ? fmt::format(", batch {} chunks", e.batch) : std::string());
  fmt::print("kv cache       {}, {:.1f} bytes per token ({:.2f}x smaller than fp16){}\n", r.kv_name,
             r.kv_bytes_per_token, r.kv_f16_bytes_per_token / r.kv_bytes_per_token,
             po.ubatch > 0 && po.ubatch < plan.ctx ? fmt::format(", ubatch {}", po.ubatch) : std::string());
  fmt::print("PPL            {:.4f} ± {:.5f}\n", r.ppl, r.ppl_err);
  fmt::print("tokens scored  {}\n", r.tokens_scored);
  if (on_gpu)
    fmt::print("tokens/s       {:.1f} ({} tokens evaluated in {:.2f} s on the GPU)\n", f.tps, r.tokens_evaluated,
               r.seconds);
  else
    fmt::print("tokens/s       {:.1f} ({} tokens evaluated in {:.2f} s, {} threads{}, kernel {})\n", f.tps,
               r.tokens_evaluated, r.seconds, num_threads(),
               r.chunk_parallel > 1 ? fmt::format(" on {} chunks at once", r.chunk_parallel) : std::string(),
               kernel_level_name(kernel_level()));
  if (e.cpu_base)  // the pair's rate above; the evaluated model's own, as if it ran alone
    fmt::print("model alone    {:.1f} tokens/s (its forward and head {:.2f} s; the KL baseline's {:.2f} s{})\n",
               r.model_seconds > 0 ? double(r.tokens_evaluated) / r.model_seconds : 0.0, r.model_seconds,
               r.base_seconds,
               o.kl_base_cache.empty() ? ""
               : cache_read            ? ", its hidden states read from " + o.kl_base_cache
                                       : ", its hidden states kept in " + o.kl_base_cache);
  fmt::print("wall time      {:.2f} s (load {:.2f} s)\n", f.wall, load_s);
  fmt::print("peak RSS       {:.1f} MiB\n", f.rss_mib);
  if (r.kld && on_gpu) fmt::print("\nKL baseline    {} on cuda ({}, f16 cache)", o.kl_base, e.gpu_base->kind());
  if (r.kld) fmt::print("\n{}", format_kld_summary(*r.kld));
  if (po.kv.stats)  // kv_stats.h: what the columns are
    fmt::print("\nkv stats (encoded vectors against the exact ones; scores against exact keys)\n{}",
               po.kv.stats->table());

  if (!o.json_path.empty()) {
    json j = result_json(o, cfg, r, f, src_bytes, e.compute(), e.weight_bytes(), load_s, po.bos_id >= 0);
    if (on_gpu) {
      j["device"] = o.device;
      j["gpu"] = dev->describe();
      j["batch"] = e.batch;
    } else {
      j["ubatch"] = po.ubatch;
      j["threads"] = num_threads();
      j["chunk_parallel"] = r.chunk_parallel;
      j["bytes_per_chunk"] = r.bytes_per_chunk;
      j["kernel_level"] = kernel_level_name(kernel_level());
    }
    if (!o.kl_base.empty()) {
      j["kl_base_model"] = o.kl_base;
      j["kl_base_kv"] = on_gpu ? "f16" : po.base_kv;
      if (on_gpu) j["kl_base_compute"] = e.gpu_base->kind();
    }
    if (!o.kl_base_cache.empty()) j["kl_base_cache"] = cache_read ? "read" : "written";
    if (po.kv.stats) j["kv_stats"] = po.kv.stats->to_json();
    const std::string s = j.dump(2) + "\n";
    write_file_atomic(o.json_path, s.data(), s.size());
  }
  return 0;
}

const Registrar reg{
    {"eval-ppl", "perplexity and KL divergence of a model on a text", [](CLI::App& sub) -> std::function<int()> {
       auto o = std::make_shared<Options>();
       sub.add_option("--model", o->model, "GGUF file or Hugging Face folder (required)");
       sub.add_option("--text", o->text, "text file, wiki.test.raw for --method llama (required)");
       sub.add_option("--method", o->method, "llama (llama-perplexity) or chunks (GPTQ papers)")
           ->check(CLI::IsMember({"llama", "chunks"}));
       sub.add_option("--ctx", o->ctx, "tokens per chunk (default 512 llama, 2048 chunks)");
       sub.add_option("--chunks", o->chunks, "evaluate only the first N chunks");
       sub.add_option("--chunk-offset", o->chunk_offset, "start at chunk N (one part of a split run)");
       sub.add_flag("--token-stats", o->token_stats, "keep every position's NLL and KLD in the JSON (for --merge)");
       sub.add_option("--merge", o->merge, "merge the JSON parts of a split run into --json FILE")->expected(1, -1);
       sub.add_option("--threads", o->threads, "threads (default: one per physical core)");
       sub.add_option("--chunk-parallel", o->chunk_parallel,
                      "cpu: chunks scored at once, each by its share of --threads with its own KV cache and "
                      "activations (the same results; default: --threads over the team one chunk of this model keeps "
                      "busy, about a thread per 32M multiply-adds a token: several for SmolLM-sized models, 1 "
                      "for 1B and up, and with --kv-stats)");
       sub.add_option(
           "--device", o->device,
           "cpu (default) or cuda (the forward on the GPU; a build with -DQT_CUDA=ON; KV methods: f16, "
           "affine, kivi, turboquant_mse in CUDA kernels, the others through their CPU codecs on --threads); "
           "cuda:N a device; cuda:0,1 the layers split across devices, chunks pipelined (f16 cache)");
       sub.add_option("--attention", o->attention,
                      "cuda: fused (default: one kernel, no score matrix, where it applies) or materialized "
                      "(scores through cuBLAS and a softmax kernel everywhere; the fused kernel's baseline)")
           ->check(CLI::IsMember({"fused", "materialized"}));
       sub.add_option("--batch", o->batch, "cuda: chunks per forward (default: as many as fit, up to 32768 tokens)");
       sub.add_option("--compute", o->compute, "f32 (default) or bf16 weights for the matmuls (cuda: bf16)")
           ->check(CLI::IsMember({"f32", "bf16"}));
       sub.add_option("--weight-act", o->weight_act,
                      "cpu: affine 4-bit layers int8 (tokens to int8 per weight group, llama.cpp's Q4_1 x Q8_1 "
                      "arithmetic) or int8-token (one int8 step per token), default fp32 tokens (int16 per group); "
                      "GGUF blocks (either value): one token's GEMV through int8 tokens per block of 32")
           ->check(CLI::IsMember({"int8", "int8-token"}));
       sub.add_option("--kernel", o->kernel, "force a lower kernel level: scalar, avx2, avx512, amx");
       add_kv_flags(sub, o->kvf);
       sub.add_flag("--kv-stats", o->kv_stats,
                    "per layer: keys' and values' cosine and relative MSE against full precision, and the "
                    "attention-score error (keeps an exact copy of the keys; slower)");
       sub.add_option("--ubatch", o->ubatch, "tokens per forward call (default 512)");
       sub.add_option("--kl-base-kv", o->kl_base_kv, "KV cache of the KL baseline (default f32)");
       sub.add_option("--kl-base-model", o->kl_base, "baseline model run alongside (fp32) for the KL divergence");
       sub.add_option("--kl-base-cache", o->kl_base_cache,
                      "keep the KL baseline's hidden states in FILE: a later run against the same "
                      "baseline, text and chunks reads them instead of running its forward (same KLD)");
       sub.add_option("--json", o->json_path, "also write the results as JSON to FILE");
       sub.add_flag("--running", o->running, "print llama.cpp's [i] running estimates");
       return [o] { return run(*o); };
     }}};

}  // namespace cmd_eval_ppl
}  // namespace qt
