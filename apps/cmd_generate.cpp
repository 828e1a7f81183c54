// quanttool generate --model M --prompt TEXT|--prompt-file F [--chat]: text generation from any
// checkpoint eval-ppl runs (every layout, every KV method), streamed to stdout as it is produced;
// prompt and generation speed on stderr at the end. Greedy by default (--temp 0), which gives
// transformers' generate(do_sample=False) token for token.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "apps/command.h"
#include "apps/kv_flags.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "formats/tokenizer/chat_prompt.h"
#include "formats/tokenizer/text_stream.h"
#include "libquant/cpu_features.h"
#include "libquant/cuda/backend.h"
#include "libquant/eval/generate.h"
#include "libquant/model/llama.h"
#include "libquant/parallel.h"

namespace qt {
namespace cmd_generate {

struct Options {
  std::string model, prompt, prompt_file, system, compute = "f32", device = "cpu", kernel, weight_act;
  bool chat = false, show_prompt = false;
  int max_tokens = 256, threads = 0;
  SamplingOptions sampling;
  std::vector<std::string> stops;
  KvFlags kvf;
};

std::string prompt_text(const Options& o) {
  if (o.prompt.empty() == o.prompt_file.empty())
    user_error("generate needs --prompt TEXT or --prompt-file FILE (one of them)");
  if (!o.prompt.empty()) return o.prompt;
  if (!std::filesystem::is_regular_file(o.prompt_file)) user_error("{}: no such file", o.prompt_file);
  if (std::filesystem::file_size(o.prompt_file) == 0) user_error("{}: the prompt is empty", o.prompt_file);
  MappedFile mf = map_file(o.prompt_file);
  return std::string(reinterpret_cast<const char*>(mf.data), mf.size);
}

// --device cuda: the GPU backend has a whole-sequence forward and no decode cache, so each step
// runs the sequence so far (quadratic in its length; correct, not fast).
StepFn cuda_step(cuda::GpuModel& model, std::vector<int32_t>& history) {
  return [&model, &history](const int32_t* ids, int n, float* logits) {
    history.insert(history.end(), ids, ids + n);
    const std::vector<float> all = cuda::forward_logits(model, history);
    const size_t V = size_t(model.config().vocab);
    std::copy(all.end() - ptrdiff_t(V), all.end(), logits);
  };
}

int run(const Options& o) {
  if (o.model.empty()) user_error("generate needs --model");
  if (o.max_tokens < 0) user_error("--max-tokens: must be at least 0, got {}", o.max_tokens);
  check_sampling_options(o.sampling);
  if (!o.system.empty() && !o.chat) user_error("--system is a chat message; give --chat too");
  const bool gpu = o.device == "cuda";
  if (gpu) {
    if (!cuda::built()) cuda::device_info();  // the one-line "built without CUDA" error
    if (o.compute != "bf16") user_error("--device cuda computes in bf16: give --compute bf16");
    if (!o.kernel.empty()) user_error("--kernel picks a CPU kernel level; it has no meaning with --device cuda");
    if (!o.weight_act.empty()) user_error("--weight-act: not on cuda yet");
    const KvFlags none;
    if ((!o.kvf.kv.empty() && o.kvf.kv != "f16") || !o.kvf.kv_k.empty() || !o.kvf.kv_v.empty() ||
        !o.kvf.recipe.empty() || !o.kvf.key_center.empty() || o.kvf.residual != none.residual)
      user_error("--device cuda: generate runs the GPU's f16 cache only (--kv f16, the default there)");
    cuda::device_info();
  }
  apply_cpu_flags(o.threads, o.kernel);
  const std::string text = prompt_text(o);

  const auto t_start = std::chrono::steady_clock::now();
  Checkpoint ck = load_checkpoint(o.model, gpu ? LoadMode::Eager : LoadMode::Native);
  if (!ck.tokenizer) user_error("{}: the checkpoint has no tokenizer", o.model);
  const std::shared_ptr<const Tokenizer> tok(std::move(ck.tokenizer));
  const ModelConfig cfg = ck.config;

  GenerateOptions go;
  go.sampling = o.sampling;
  std::vector<int32_t> ids;
  if (o.chat) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
    messages.push_back({{"role", "user"}, {"content", text}});
    const std::string rendered = render_chat(*tok, messages, true);
    if (o.show_prompt) std::fprintf(stderr, "%s", rendered.c_str());
    ids = encode_chat(*tok, rendered);
    go.stop_ids = chat_stop_ids(*tok);
  } else {
    ids = tok->encode(text, true, true);
    if (tok->eos_id() >= 0) go.stop_ids.push_back(tok->eos_id());
  }
  if (cfg.eos_token_id >= 0 && std::find(go.stop_ids.begin(), go.stop_ids.end(), cfg.eos_token_id) == go.stop_ids.end())
    go.stop_ids.push_back(cfg.eos_token_id);
  if (ids.empty()) user_error("the prompt has no tokens");
  const int n_prompt = int(ids.size());
  if (cfg.max_position > 0 && n_prompt >= cfg.max_position)
    user_error("the prompt has {} tokens; the model's context is {} positions", n_prompt, cfg.max_position);
  go.max_tokens = cfg.max_position > 0 ? std::min(o.max_tokens, cfg.max_position - n_prompt) : o.max_tokens;
  const int ctx = n_prompt + std::max(go.max_tokens, 1);

  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<cuda::GpuModel> gpu_model;
  std::vector<int32_t> history;
  StepFn step;
  std::string kind;
  if (gpu) {
    cuda::check_supported(ck);
    gpu_model = std::make_unique<cuda::GpuModel>(std::move(ck));
    step = cuda_step(*gpu_model, history);
    kind = gpu_model->kind() + " on cuda";
  } else {
    const kv::KVConfig kc = kv_config_from_flags(o.kvf, cfg);
    PackedLinearOptions lo;
    lo.compute = o.compute == "bf16" ? Compute::BF16 : Compute::F32;
    lo.weight_act = weight_act_from_flag(o.weight_act);
    model = std::make_unique<LlamaModel>(std::move(ck), checkpoint_linear_factory(ck, lo));
    cache = model->make_cache(ctx, kc);
    step = model_step(*model, *cache);
    kind = model->linear_kind() + ", kv " + kc.describe();
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

  TextStream stream(*tok, o.stops);
  auto emit = [](const std::string& s) {
    if (s.empty()) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  const GenerateResult r = generate(step, cfg.vocab, ids, go, [&](int32_t id) {
    emit(stream.push(id));
    return !stream.stopped();
  });
  emit(stream.finish());
  std::fputc('\n', stdout);
  std::fflush(stdout);

  const char* why = r.stopped_by_token ? "end of turn" : r.stopped_by_caller ? "stop string" : "token limit";
  std::fprintf(stderr, "\nmodel          %s (%s, %s)\n", o.model.c_str(), cfg.arch.c_str(), kind.c_str());
  std::fprintf(stderr, "prompt         %d tokens in %.3f s: %.1f tok/s\n", r.prompt_tokens, r.prefill_s,
               r.prompt_tps());
  std::fprintf(stderr, "first token    %.3f s (the prompt's forward and the first choice; loading excluded)\n",
               r.first_token_s);
  std::fprintf(stderr, "generated      %zu tokens (%s); %.2f tok/s over the %zu after the first (%.3f s)\n",
               r.ids.size(), why, r.decode_tps(), r.ids.empty() ? size_t(0) : r.ids.size() - 1, r.decode_s);
  std::fprintf(stderr, "threads        %d, kernel %s; load %.2f s\n", num_threads(), kernel_level_name(kernel_level()),
               load_s);
  return 0;
}

const Registrar reg{
    {"generate", "generate text from a prompt (streamed), greedy or sampled",
     [](CLI::App& sub) -> std::function<int()> {
       auto o = std::make_shared<Options>();
       sub.add_option("--model", o->model, "GGUF file or model folder (required)");
       sub.add_option("--prompt", o->prompt, "the prompt text");
       sub.add_option("--prompt-file", o->prompt_file, "read the prompt from FILE");
       sub.add_flag("--chat", o->chat,
                    "the prompt is a user message: apply the model's chat template, stop at its end of turn");
       sub.add_option("--system", o->system, "with --chat: a system message before the prompt");
       sub.add_flag("--show-prompt", o->show_prompt, "with --chat: print the rendered prompt on stderr");
       sub.add_option("--max-tokens", o->max_tokens, "most tokens to generate (default 256)");
       sub.add_option("--temp", o->sampling.temperature, "temperature; 0 (default) is greedy");
       sub.add_option("--top-k", o->sampling.top_k, "sample from the K most likely tokens (0: all)");
       sub.add_option("--top-p", o->sampling.top_p, "sample from the smallest set reaching probability P (default 1)");
       sub.add_option("--seed", o->sampling.seed, "seed of the sampler (default 0)");
       sub.add_option("--stop", o->stops, "stop when the text contains STRING (repeatable)")->expected(1)->take_all();
       sub.add_option("--threads", o->threads, "threads (default: all cores)");
       sub.add_option("--weight-act", o->weight_act,
                      "cpu: int8 (affine 4-bit layers and GGUF blocks: tokens to int8 per group, llama.cpp's "
                      "arithmetic) or int8-token; default: fp32 tokens")
           ->check(CLI::IsMember({"int8", "int8-token"}));
       sub.add_option("--kernel", o->kernel, "force a lower kernel level: scalar, avx2, avx512, amx");
       sub.add_option("--compute", o->compute, "f32 (default) or bf16 weights for the matmuls (cuda: bf16)")
           ->check(CLI::IsMember({"f32", "bf16"}));
       sub.add_option("--device", o->device, "cpu (default) or cuda (a build with -DQT_CUDA=ON)")
           ->check(CLI::IsMember({"cpu", "cuda"}));
       add_kv_flags(sub, o->kvf);
       return [o] { return run(*o); };
     }}};

}  // namespace cmd_generate
}  // namespace qt
