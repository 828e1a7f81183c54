#include "libquant/bench/decode_bench.h"

#include <algorithm>
#include <chrono>

#include "formats/error.h"

namespace qt::bench {

namespace {
int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }
}  // namespace

DecodeResult run_decode(LlamaModel& model, KVCache& cache, const std::vector<int32_t>& prompt, int gen, int ubatch) {
  using clock = std::chrono::steady_clock;
  if (prompt.empty()) user_error("bench --decode: the prompt has no tokens");
  if (gen < 0 || ubatch <= 0) user_error("bench --decode: --gen must be ≥ 0 and the batch positive");
  DecodeResult r;
  r.prompt = int(prompt.size());
  r.gen = gen;
  std::vector<float> logits(size_t(model.config().vocab));
  const int n = int(prompt.size());
  auto t0 = clock::now();
  for (int p = 0; p < n; p += ubatch) {  // only the prompt's last row needs logits
    const int b = std::min(ubatch, n - p);
    const bool last = p + b == n;
    model.forward(prompt.data() + p, b, p, cache, last ? b - 1 : 0, last ? 1 : 0, logits.data());
  }
  auto t1 = clock::now();
  int32_t tok = argmax(logits);
  for (int i = 0; i < gen; ++i) {
    r.generated.push_back(tok);
    model.forward(&tok, 1, n + i, cache, 0, 1, logits.data());
    tok = argmax(logits);
  }
  auto t2 = clock::now();
  r.prefill_s = std::chrono::duration<double>(t1 - t0).count();
  r.decode_s = std::chrono::duration<double>(t2 - t1).count();
  return r;
}

}  // namespace qt::bench
