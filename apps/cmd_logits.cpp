// quanttool logits --model PATH --text FILE [--tokens N] [--out FILE] [--compute f32|bf16]
// The logits of the first N tokens of a text (no BOS, one forward pass, as a fresh sequence),
// written as raw little-endian fp32 [N, vocab] — numpy.fromfile(path, "<f4").reshape(N, -1) — so
// acceptance scripts can compare our forward pass on any checkpoint (GGUF, HF, MLX,
// compressed-tensors, bnb, native) with the library that defines the format. The token ids are
// written beside it (FILE.ids, one per line) so the other side runs exactly the same input.
#include <cstdio>
#include <string>

#include "apps/command.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "libquant/cuda/backend.h"
#include "libquant/model/llama.h"
#include "libquant/parallel.h"

namespace qt {
namespace cmd_logits {

struct Args {
  std::string model, text, out, compute = "f32", device = "cpu", kv = "f32";
  int tokens = 64, threads = 0;
};

int run(const Args& a) {
  if (a.tokens <= 0) user_error("--tokens: must be positive, got {}", a.tokens);
  if (a.compute != "f32" && a.compute != "bf16") user_error("--compute: '{}' is not f32 or bf16", a.compute);
  if (a.threads > 0) set_threads(a.threads);
  MappedFile mf = map_file(a.text);
  const std::string text(reinterpret_cast<const char*>(mf.data), mf.size);
  const bool gpu = a.device == "cuda";
  if (gpu) {
    if (!cuda::built()) cuda::device_info();  // the one-line "built without CUDA" error
    if (a.compute != "bf16") user_error("--device cuda computes in bf16: give --compute bf16");
    if (a.kv != "f16") user_error("--device cuda keeps an f16 cache: give --kv f16");
    cuda::device_info();
  }
  Checkpoint ck = load_checkpoint(a.model, gpu ? LoadMode::Eager : LoadMode::Native);
  if (!ck.tokenizer) user_error("{}: the checkpoint has no tokenizer", a.model);
  std::vector<int32_t> ids = ck.tokenizer->encode(text, false);
  if (int64_t(ids.size()) < a.tokens) user_error("{}: {} tokens, fewer than --tokens {}", a.text, ids.size(), a.tokens);
  ids.resize(size_t(a.tokens));
  std::vector<float> logits;
  int64_t V = 0;
  std::string kind;
  size_t wbytes = 0;
  if (gpu) {
    cuda::GpuModel model(std::move(ck));
    V = model.config().vocab;
    logits = cuda::forward_logits(model, ids);
    kind = model.kind() + " (cuda)", wbytes = model.weight_bytes();
  } else {
    PackedLinearOptions lo;
    lo.compute = a.compute == "bf16" ? Compute::BF16 : Compute::F32;
    LlamaModel model(std::move(ck), checkpoint_linear_factory(ck, lo));
    V = model.config().vocab;
    auto cache = model.make_cache(a.tokens, a.kv);
    logits.resize(size_t(a.tokens) * size_t(V));
    model.forward(ids.data(), a.tokens, 0, *cache, 0, a.tokens, logits.data());
    kind = model.linear_kind(), wbytes = model.weight_bytes();
  }

  std::string id_lines;
  for (int32_t id : ids) id_lines += std::to_string(id) + "\n";
  if (!a.out.empty()) {
    write_file_atomic(a.out, logits.data(), logits.size() * sizeof(float));
    write_file_atomic(a.out + ".ids", id_lines.data(), id_lines.size());
  }
  // A summary on stdout: argmax and max logit of a few positions.
  for (int t : {0, a.tokens / 2, a.tokens - 1}) {
    const float* row = logits.data() + size_t(t) * size_t(V);
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (row[v] > row[best]) best = v;
    std::printf("position %d: argmax %lld logit %.6f\n", t, static_cast<long long>(best), row[best]);
  }
  std::printf("linears %s, %zu weight bytes\n", kind.c_str(), wbytes);
  return 0;
}

const Registrar reg({"logits", "Logits of the first N tokens of a text (raw fp32), for comparisons",
                     [](CLI::App& sub) -> std::function<int()> {
                       auto a = std::make_shared<Args>();
                       sub.add_option("--model", a->model, "a .gguf file or a model folder")->required();
                       sub.add_option("--text", a->text, "UTF-8 text file")->required();
                       sub.add_option("--tokens", a->tokens, "how many tokens (default 64)");
                       sub.add_option("--out", a->out, "raw fp32 [tokens, vocab] output file (ids in FILE.ids)");
                       sub.add_option("--compute", a->compute, "f32 or bf16 matmuls");
                       sub.add_option("--kv", a->kv,
                                      "KV cache method (default f32; f16 to compare with --device cuda)");
                       sub.add_option("--device", a->device, "cpu (default) or cuda (bf16, f16 cache)")
                           ->check(CLI::IsMember({"cpu", "cuda"}));
                       sub.add_option("--threads", a->threads, "threads (default: all cores)");
                       return [a] { return run(*a); };
                     }});

}  // namespace cmd_logits
}  // namespace qt
