#include "calib/act_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unistd.h>

#include "calib/expert_prior.h"
#include "formats/error.h"
#include "libquant/model/block_tensors.h"

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
  int64_t tokens = 0;  // rows seen: every token, or for an expert those routed to it
};

bool is_expert(const ModelConfig& c, const std::string& name) {
  return c.is_moe() && name.find(std::string(".") + c.desc().moe->experts + ".") != std::string::npos;
}

// Layer l's experts (calib/expert_prior.h): every expert's gate and down inputs get the prior of
// the layer's expert average, an expert no token reached included (its entries are made here, its
// up_proj pointed at its gate_proj's, its max |x| the layer's experts' largest). Returns how many
// expert inputs saw fewer than kExpertPriorTokens tokens.
int expert_prior(const ModelConfig& c, int l, std::map<std::string, Accum>& acc,
                 std::map<std::string, std::string>& same_as) {
  const MoeNames& m = *c.desc().moe;
  const std::string prefix = "model.layers." + std::to_string(l) + "." + m.experts + ".";
  int few = 0;
  for (int k = 0; k < 2; ++k) {
    const char* proj = k == 0 ? m.gate : m.down;
    std::vector<std::vector<double>*> sums;
    std::vector<int64_t> counts;
    std::vector<float> absmax;
    for (int e = 0; e < c.n_experts; ++e) {
      const std::string x = prefix + std::to_string(e) + ".";
      Accum& a = acc[x + proj + ".weight"];
      if (k == 0) same_as[x + m.up + ".weight"] = x + proj + ".weight";
      sums.push_back(&a.sumsq);
      counts.push_back(a.tokens);
      if (absmax.size() < a.absmax.size()) absmax.resize(a.absmax.size(), 0.0f);
      for (size_t j = 0; j < a.absmax.size(); ++j) absmax[j] = std::max(absmax[j], a.absmax[j]);
    }
    few += add_expert_prior(sums, counts);
    for (int e = 0; e < c.n_experts; ++e) {
      Accum& a = acc[prefix + std::to_string(e) + "." + proj + ".weight"];
      if (a.absmax.empty()) a.absmax = absmax;
    }
  }
  return few;
}

}  // namespace

ActStats collect_act_stats(LlamaModel& model, const std::vector<int32_t>& tokens, int ctx, int chunks, int32_t bos_id) {
  const int n = int(std::min<int64_t>(chunks, int64_t(tokens.size()) / ctx));
  if (n <= 0) user_error("calibrate: the text has fewer than {} tokens, one chunk", ctx);
  std::map<std::string, Accum> acc;
  // q/k/v (gate/up, an expert's gate/up) read the same input: the first of them records it, the
  // others copy its figures at the end.
  std::map<std::string, std::string> same_as;
  const ModelConfig& c = model.config();
  model.set_observer([&](const std::string& name, const float* x, int64_t nt, int64_t in) {
    if (name.rfind("model.layers.", 0) == 0) {
      const size_t at = name.find('.', 13) + 1;
      const std::string lead = shared_input_leader(c, name.substr(at));
      if (!lead.empty()) {
        same_as[name] = name.substr(0, at) + lead;
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
    a.tokens += nt;
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
  for (int l = 0; l < c.n_layers; ++l)
    if (c.is_moe_layer(l)) s.experts_with_few_tokens += expert_prior(c, l, acc, same_as);
  for (auto& [name, a] : acc) {
    ChannelStats cs;
    cs.absmax = a.absmax;
    cs.tokens = a.tokens;
    cs.sqmean.resize(a.sumsq.size());
    // Dense: over every token. An expert: its tokens plus the prior's (dividing by the same count
    // as add_expert_prior added: an unreached expert gets the layer's expert average itself).
    const int64_t d = a.tokens + (is_expert(c, name) ? kExpertPriorTokens : 0);
    for (size_t j = 0; j < a.sumsq.size(); ++j) cs.sqmean[j] = float(a.sumsq[j] / double(d));
    s.linears[name] = std::move(cs);
  }
  for (auto& [name, src] : same_as) s.linears[name] = s.linears.at(src);
  return s;
}

}  // namespace qt::calib
