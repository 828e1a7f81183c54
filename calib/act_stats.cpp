#include "calib/act_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unistd.h>

#include "formats/error.h"

namespace qt::calib {

const ChannelStats* ActStats::find(const std::string& name, bool embedding_is_head) const {
  auto it = linears.find(name);
  if (it != linears.end()) return &it->second;
  if (name == "model.embed_tokens.weight" && embedding_is_head) return find("lm_head.weight", false);
  return nullptr;
}

namespace {

// Running sums over every token seen (double: tens of thousands of tokens).
struct Accum {
  std::vector<float> absmax;
  std::vector<double> sumsq;
};

}  // namespace

ActStats collect_act_stats(LlamaModel& model, const std::vector<int32_t>& tokens, int ctx, int chunks, int32_t bos_id) {
  const int n = int(std::min<int64_t>(chunks, int64_t(tokens.size()) / ctx));
  if (n <= 0) user_error("calibrate: the text has fewer than {} tokens, one chunk", ctx);
  std::map<std::string, Accum> acc;
  // q/k/v (gate/up) read the same input: q_proj (gate_proj) of the layer records it, the others
  // copy its figures at the end. (By name: every layer passes the same scratch buffer.)
  std::map<std::string, std::string> same_as;
  model.set_observer([&](const std::string& name, const float* x, int64_t nt, int64_t in) {
    for (auto [from, to] : {std::pair{"self_attn.k_proj.weight", "self_attn.q_proj.weight"},
                            std::pair{"self_attn.v_proj.weight", "self_attn.q_proj.weight"},
                            std::pair{"mlp.up_proj.weight", "mlp.gate_proj.weight"}}) {
      const std::string f = from;
      if (name.size() > f.size() && name.compare(name.size() - f.size(), f.size(), f) == 0) {
        same_as[name] = name.substr(0, name.size() - f.size()) + to;
        return;
      }
    }
    Accum& a = acc[name];
    if (a.absmax.empty()) a.absmax.assign(size_t(in), 0.0f), a.sumsq.assign(size_t(in), 0.0);
    // Channels split into runs per thread; tokens outer so each run is read contiguously.
    const int64_t run = 64;
#pragma omp parallel for schedule(static)
    for (int64_t j0 = 0; j0 < in; j0 += run) {
      const int64_t j1 = std::min(in, j0 + run);
      double s[64] = {};
      float m[64];
      for (int64_t j = j0; j < j1; ++j) m[j - j0] = a.absmax[j];
      for (int64_t t = 0; t < nt; ++t) {
        const float* row = x + t * in;
        for (int64_t j = j0; j < j1; ++j) {
          const float v = row[j];
          m[j - j0] = std::max(m[j - j0], std::abs(v));
          s[j - j0] += double(v) * v;
        }
      }
      for (int64_t j = j0; j < j1; ++j) a.absmax[j] = m[j - j0], a.sumsq[j] += s[j - j0];
    }
  });
  std::vector<int32_t> chunk(size_t(ctx), 0);
  std::vector<float> logits;
  const bool tty = isatty(2);
  for (int ci = 0; ci < n; ++ci) {
    std::copy(tokens.begin() + int64_t(ci) * ctx, tokens.begin() + int64_t(ci + 1) * ctx, chunk.begin());
    if (bos_id >= 0) chunk[0] = bos_id;
    auto cache = model.make_cache(ctx);
    const float* h = model.forward_hidden(chunk.data(), ctx, 0, *cache);
    // The output head's input: the final-normed hidden states (its logits are not needed, but
    // the observer sees the head only when it runs).
    logits.resize(size_t(ctx) * model.config().vocab);
    model.output_head(h, ctx, logits.data());
    if (tty) std::fprintf(stderr, "\ract-stats: chunk %d/%d", ci + 1, n);
  }
  if (tty) std::fprintf(stderr, "\n");
  model.set_observer(nullptr);
  ActStats s;
  s.tokens = int64_t(n) * ctx;
  for (auto& [name, a] : acc) {
    ChannelStats c;
    c.absmax = a.absmax;
    c.sqmean.resize(a.sumsq.size());
    for (size_t j = 0; j < a.sumsq.size(); ++j) c.sqmean[j] = float(a.sumsq[j] / double(s.tokens));
    s.linears[name] = std::move(c);
  }
  for (auto& [name, src] : same_as) s.linears[name] = s.linears.at(src);
  return s;
}

}  // namespace qt::calib
