// quanttool eval-ppl --model PATH --text FILE: perplexity (llama.cpp's or the GPTQ papers'
// protocol, libquant/eval/perplexity.h) and, with --kl-base-model, the KL divergence against a
// baseline model run alongside in the same process.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "apps/command.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "libquant/cpu_features.h"
#include "libquant/eval/perplexity.h"
#include "libquant/model/llama.h"
#include "libquant/parallel.h"

namespace qt {
namespace {

using nlohmann::json;

struct Options {
  std::string model, text, method = "llama", compute = "f32", kernel, json_path, kl_base, kv = "f32";
  int ctx = 0, chunks = -1, threads = 0;
  bool running = false;
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

int run(const Options& o) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  if (o.threads < 0) user_error("--threads: must be positive, got {}", o.threads);
  if (o.threads > 0) set_threads(o.threads);
  if (!o.kernel.empty()) {
    KernelLevel lvl;
    if (!parse_kernel_level(o.kernel, &lvl))
      user_error("--kernel: '{}' is not one of scalar, avx2, avx512", o.kernel);
    if (lvl > max_kernel_level())
      user_error("--kernel {}: this CPU supports at most {}", o.kernel, kernel_level_name(max_kernel_level()));
    set_kernel_level(lvl);
  }
  PplOptions po;
  po.method = o.method == "chunks" ? PplMethod::Chunks : PplMethod::Llama;
  po.ctx = o.ctx > 0 ? o.ctx : (po.method == PplMethod::Chunks ? 2048 : 512);
  if (o.ctx < 0) user_error("--ctx: must be positive, got {}", o.ctx);
  po.max_chunks = o.chunks;
  po.kv = o.kv;
  const Compute compute = o.compute == "bf16" ? Compute::BF16 : Compute::F32;

  const std::string text = read_text(o.text);
  Checkpoint ck = load_checkpoint(o.model);
  if (!ck.tokenizer) user_error("{}: the checkpoint has no tokenizer", o.model);
  const ModelConfig cfg = ck.config;
  if (cfg.max_position > 0 && po.ctx > cfg.max_position)
    user_error("--ctx {}: larger than the model's context of {} positions", po.ctx, cfg.max_position);
  const std::vector<int32_t> ids = ck.tokenizer->encode(text, true);
  if (ids.empty()) user_error("{}: the text has no tokens", o.text);
  if (po.method == PplMethod::Llama && ck.tokenizer->add_bos()) po.bos_id = ck.tokenizer->bos_id();
  const ChunkPlan plan = plan_chunks(po.method, po.ctx, int64_t(ids.size()), po.max_chunks);
  if (plan.n_chunks == 0) user_error("--chunks 0: nothing to evaluate");

  std::unique_ptr<LlamaModel> base;
  if (!o.kl_base.empty()) {
    Checkpoint bk = load_checkpoint(o.kl_base);
    check_kl_baseline(ck.config, bk.config, o.kl_base, ids, ids);  // shapes and vocabulary first
    if (!bk.tokenizer) user_error("{}: the checkpoint has no tokenizer", o.kl_base);
    check_kl_baseline(ck.config, bk.config, o.kl_base, ids, bk.tokenizer->encode(text, true));
    // The reference runs in fp32 (from its packed codes, if it is a quantized folder).
    base = std::make_unique<LlamaModel>(std::move(bk), checkpoint_linear_factory(bk, {}));
  }
  const uint64_t src_bytes = source_tensor_bytes(ck);
  PackedLinearOptions lo;
  lo.compute = compute;
  // Quantized folders compute from their packed codes; releases ck's tensors as it goes.
  auto model = std::make_unique<LlamaModel>(std::move(ck), checkpoint_linear_factory(ck, lo));

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
  const PplResult r = evaluate_perplexity(*model, ids, po, base.get(), progress);

  const double wall = std::chrono::duration<double>(clock::now() - t_start).count();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const double rss_mib = double(ru.ru_maxrss) / 1024.0;
  const int64_t n_params = cfg.n_params();
  const double bpw = n_params > 0 ? 8.0 * double(src_bytes) / double(n_params) : 0;
  const double tps = r.seconds > 0 ? double(r.tokens_evaluated) / r.seconds : 0;

  if (o.running) {
    std::string line;
    for (size_t i = 0; i < r.running.size(); ++i) line += fmt::format("[{}]{:.4f},", i + 1, r.running[i]);
    fmt::print("{}\n", line);
  }
  fmt::print("model          {} ({}, {} layers, {:.1f}M params)\n", o.model, cfg.arch, cfg.n_layers, n_params / 1e6);
  fmt::print("weights        {} bytes as stored, {:.3f} bits per weight; compute {} ({} bytes packed)\n",
             src_bytes, bpw, model->linear_kind(), model->weight_bytes());
  fmt::print("text           {} ({} tokens{})\n", o.text, ids.size(), po.bos_id >= 0 ? ", BOS per chunk" : "");
  fmt::print("method         {}, ctx {}, {} chunks, {} scored per chunk\n", ppl_method_name(r.method),
             plan.ctx, plan.n_chunks, plan.n_scored);
  fmt::print("PPL            {:.4f} ± {:.5f}\n", r.ppl, r.ppl_err);
  fmt::print("tokens scored  {}\n", r.tokens_scored);
  fmt::print("tokens/s       {:.1f} ({} tokens evaluated in {:.2f} s, {} threads, kernel {})\n", tps,
             r.tokens_evaluated, r.seconds, num_threads(), kernel_level_name(kernel_level()));
  fmt::print("wall time      {:.2f} s\n", wall);
  fmt::print("peak RSS       {:.1f} MiB\n", rss_mib);
  if (r.kld) fmt::print("\n{}", format_kld_summary(*r.kld));

  if (!o.json_path.empty()) {
    json j = ppl_result_json(r);
    j["model"] = o.model;
    j["text"] = o.text;
    j["arch"] = cfg.arch;
    j["n_params"] = n_params;
    j["model_bytes"] = src_bytes;
    j["bits_per_weight"] = bpw;
    j["compute"] = model->linear_kind();
    j["compute_weight_bytes"] = model->weight_bytes();
    j["kv"] = po.kv;
    j["threads"] = num_threads();
    j["kernel_level"] = kernel_level_name(kernel_level());
    j["wall_seconds"] = wall;
    j["peak_rss_mib"] = rss_mib;
    j["bos_per_chunk"] = po.bos_id >= 0;
    if (!o.kl_base.empty()) j["kl_base_model"] = o.kl_base;
    const std::string s = j.dump(2) + "\n";
    write_file_atomic(o.json_path, s.data(), s.size());
  }
  return 0;
}

const Registrar reg{{"eval-ppl", "perplexity and KL divergence of a model on a text",
                     [](CLI::App& sub) -> std::function<int()> {
                       auto o = std::make_shared<Options>();
                       sub.add_option("--model", o->model, "GGUF file or Hugging Face folder")->required();
                       sub.add_option("--text", o->text, "text file (wiki.test.raw for --method llama)")->required();
                       sub.add_option("--method", o->method, "llama (llama-perplexity) or chunks (GPTQ papers)")
                           ->check(CLI::IsMember({"llama", "chunks"}));
                       sub.add_option("--ctx", o->ctx, "tokens per chunk (default 512 llama, 2048 chunks)");
                       sub.add_option("--chunks", o->chunks, "evaluate only the first N chunks");
                       sub.add_option("--threads", o->threads, "threads (default: all cores)");
                       sub.add_option("--compute", o->compute, "f32 or bf16 weights for the matmuls")
                           ->check(CLI::IsMember({"f32", "bf16"}));
                       sub.add_option("--kernel", o->kernel, "force a lower kernel level: scalar, avx2, avx512");
                       sub.add_option("--kv", o->kv, "KV cache method (f32)");
                       sub.add_option("--kl-base-model", o->kl_base,
                                      "baseline model run alongside (fp32) for the KL divergence");
                       sub.add_option("--json", o->json_path, "also write the results as JSON to FILE");
                       sub.add_flag("--running", o->running, "print llama.cpp's [i] running estimates");
                       return [o] { return run(*o); };
                     }}};

}  // namespace
}  // namespace qt
