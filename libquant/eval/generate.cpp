#include "libquant/eval/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "formats/error.h"
#include "libquant/model/llama.h"

namespace qt {

GenerateResult generate(const StepFn& step, int vocab, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                        const TokenFn& on_token) {
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  if (prompt.empty()) user_error("the prompt has no tokens");
  Sampler sampler(o.sampling);
  GenerateResult r;
  r.prompt_tokens = int(prompt.size());
  if (o.max_tokens <= 0) return r;
  std::vector<float> logits(static_cast<size_t>(vocab));
  const auto t0 = clock::now();
  step(prompt.data(), int(prompt.size()), logits.data());
  r.prefill_s = since(t0);
  clock::time_point t_first;
  for (;;) {
    const int32_t id = sampler.sample(logits.data(), vocab);
    r.ids.push_back(id);
    if (r.ids.size() == 1)
      r.first_token_s = since(t0), t_first = clock::now();
    else
      r.decode_s = since(t_first);
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), id) != o.stop_ids.end()) {
      r.stopped_by_token = true;
      break;
    }
    if (!on_token(id)) {
      r.stopped_by_caller = true;
      break;
    }
    if (int(r.ids.size()) >= o.max_tokens) break;
    step(&id, 1, logits.data());
  }
  return r;
}

StepFn model_step(LlamaModel& model, KVCache& cache) {
  auto pos = std::make_shared<int>(0);
  return [&model, &cache, pos](const int32_t* ids, int n, float* logits) {
    model.forward(ids, n, *pos, cache, n - 1, 1, logits);
    *pos += n;
  };
}

}  // namespace qt
