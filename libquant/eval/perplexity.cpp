// Perplexity evaluation loop: chunks → model forward → output head in slices → per-row NLL
// (and KLD) in parallel → accumulation in a fixed order.
#include "libquant/eval/perplexity.h"

#include <chrono>
#include <cmath>

#include "formats/error.h"
#include "libquant/math/ops.h"

namespace qt {

const char* ppl_method_name(PplMethod m) { return m == PplMethod::Llama ? "llama" : "chunks"; }

ChunkPlan plan_chunks(PplMethod method, int ctx, int64_t n_tokens, int max_chunks, int first_chunk) {
  if (ctx < 4) user_error("--ctx {}: too small (at least 4)", ctx);
  if (n_tokens < 2 * int64_t(ctx))
    user_error("the text has {} tokens; --ctx {} needs at least {}", n_tokens, ctx, 2 * int64_t(ctx));
  ChunkPlan p;
  p.ctx = ctx;
  const int total = int(n_tokens / ctx);
  if (first_chunk < 0 || first_chunk >= total)
    user_error("--chunk-offset {}: the text has chunks 0 to {}", first_chunk, total - 1);
  p.first_chunk = first_chunk;
  p.n_chunks = total - first_chunk;
  if (max_chunks >= 0 && max_chunks < p.n_chunks) p.n_chunks = max_chunks;
  if (method == PplMethod::Llama) {
    p.first = ctx / 2;
    p.n_scored = ctx - 1 - p.first;
  } else {
    p.first = 0;
    p.n_scored = ctx - 1;
  }
  return p;
}

void check_kl_baseline(const ModelConfig& x, const ModelConfig& y, const std::string& base_path,
                       const std::vector<int32_t>& ids, const std::vector<int32_t>& base_ids) {
  if (x.vocab != y.vocab)
    user_error("--kl-base-model {}: vocabulary of {} tokens, the model has {}", base_path, y.vocab, x.vocab);
  if (x.arch != y.arch || x.hidden != y.hidden || x.n_layers != y.n_layers || x.n_heads != y.n_heads ||
      x.n_kv_heads != y.n_kv_heads || x.intermediate != y.intermediate || x.head_dim != y.head_dim)
    user_error("--kl-base-model {}: a different model ({}, {} layers x {}) from the one evaluated ({}, {} layers x {})",
               base_path, y.arch, y.n_layers, y.hidden, x.arch, x.n_layers, x.hidden);
  if (ids != base_ids)
    user_error("--kl-base-model {}: its tokenizer splits the text differently from the model's", base_path);
}

double token_nll(const float* logits, int n_vocab, int target) {
  return ops::row_stats(logits, n_vocab).lse - double(logits[target]);
}

PplResult evaluate_perplexity(LlamaModel& model, const std::vector<int32_t>& tokens, const PplOptions& opt,
                              LlamaModel* base, const ProgressFn& progress) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const ModelConfig& c = model.config();
  const int V = c.vocab;
  if (base && base->config().vocab != V)
    user_error("--kl-base-model: vocabulary of {} tokens, the model has {}", base->config().vocab, V);

  PplResult res;
  res.method = opt.method;
  res.plan = plan_chunks(opt.method, opt.ctx, int64_t(tokens.size()), opt.max_chunks, opt.first_chunk);
  res.n_tokens_text = int64_t(tokens.size());
  const ChunkPlan& P = res.plan;
  if (P.n_chunks == 0) user_error("--chunks 0: nothing to evaluate");

  kv::KVConfig kvc = opt.kv;
  if (kvc.k.empty()) {  // no per-layer methods given: the f32 cache (key centering still applies)
    const kv::KVSpec f32 = kv::parse_kv_spec("f32", "kv");
    kvc.k.assign(size_t(c.n_layers), f32);
    kvc.v.assign(size_t(c.n_layers), f32);
  }
  auto cache = model.make_cache(P.ctx, kvc);
  std::unique_ptr<KVCache> base_cache;
  if (base) base_cache = base->make_cache(P.ctx, opt.base_kv);
  res.kv_name = cache->name();
  res.kv_bytes_per_token = cache->bytes_per_token();
  res.kv_f16_bytes_per_token = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * 2;
  const int ub = opt.ubatch > 0 ? std::min(opt.ubatch, P.ctx) : P.ctx;
  std::vector<float> hidden(ub < P.ctx ? size_t(P.ctx) * c.hidden : 0);
  // The chunk's final hidden states, in forward calls of `ub` tokens.
  auto run_chunk = [&](LlamaModel& m, KVCache& kc, const int32_t* toks) -> const float* {
    if (ub >= P.ctx) return m.forward_hidden(toks, P.ctx, 0, kc);
    for (int p0 = 0; p0 < P.ctx; p0 += ub) {
      const int n = std::min(ub, P.ctx - p0);
      const float* h = m.forward_hidden(toks + p0, n, p0, kc);
      std::copy(h, h + size_t(n) * c.hidden, hidden.begin() + size_t(p0) * c.hidden);
    }
    return hidden.data();
  };

  const int slice = std::max(1, std::min(opt.head_rows, P.n_scored));
  std::vector<float> logits(size_t(slice) * V), base_logits(base ? size_t(slice) * V : 0);
  std::vector<double> nll(P.n_scored);
  std::vector<KldToken> kt(base ? P.n_scored : 0);
  std::vector<int32_t> chunk(P.ctx);
  double sum = 0, sum2 = 0;
  int64_t count = 0;
  KldAccumulator kacc;
  const int64_t bh = base ? base->config().hidden : 0;
  const size_t per_chunk = size_t(P.n_scored) * size_t(bh);
  const bool fill = base && opt.base_hidden && opt.base_hidden->empty();
  const bool reuse = base && opt.base_hidden && !fill;
  if (reuse && opt.base_hidden->size() != size_t(P.n_chunks) * per_chunk)
    user_error("KL baseline hidden states: {} floats kept, {} needed", opt.base_hidden->size(),
               size_t(P.n_chunks) * per_chunk);
  if (fill) opt.base_hidden->reserve(size_t(P.n_chunks) * per_chunk);

  for (int ci = 0; ci < P.n_chunks; ++ci) {
    const int32_t* src = tokens.data() + int64_t(P.first_chunk + ci) * P.ctx;
    std::copy(src, src + P.ctx, chunk.begin());
    if (opt.method == PplMethod::Llama && opt.bos_id >= 0) chunk[0] = opt.bos_id;

    // Each model's forward and head timed on its own: a KL run reports the evaluated model's
    // speed, not that of the pair.
    auto t = clock::now();
    auto lap = [&](double& acc) {
      const auto now = clock::now();
      acc += std::chrono::duration<double>(now - t).count();
      t = now;
    };
    cache->clear();
    const float* h = run_chunk(model, *cache, chunk.data());
    lap(res.model_seconds);
    const float* hb = nullptr;  // the baseline's hidden state at the first scored row
    if (reuse) {
      hb = opt.base_hidden->data() + size_t(ci) * per_chunk;
    } else if (base) {
      base_cache->clear();
      hb = base->forward_hidden(chunk.data(), P.ctx, 0, *base_cache) + int64_t(P.first) * bh;
      if (fill) opt.base_hidden->insert(opt.base_hidden->end(), hb, hb + per_chunk);
      lap(res.base_seconds);
    }
    for (int r0 = 0; r0 < P.n_scored; r0 += slice) {
      const int nr = std::min(slice, P.n_scored - r0);
      const int row = P.first + r0;  // position of the first logit row of this slice
      t = clock::now();
      model.output_head(h + int64_t(row) * c.hidden, nr, logits.data());
      lap(res.model_seconds);
      if (base) {
        base->output_head(hb + int64_t(r0) * bh, nr, base_logits.data());
        lap(res.base_seconds);
      }
#pragma omp parallel for schedule(dynamic, 4)
      for (int r = 0; r < nr; ++r) {
        const int target = src[row + r + 1];
        const float* lt = logits.data() + size_t(r) * V;
        if (base) {
          kt[r0 + r] = kld_token(base_logits.data() + size_t(r) * V, lt, V, target);
          nll[r0 + r] = kt[r0 + r].nll;
        } else {
          nll[r0 + r] = token_nll(lt, V, target);
        }
      }
    }
    for (int r = 0; r < P.n_scored; ++r) {  // fixed order: thread-count independent sums
      sum += nll[r];
      sum2 += nll[r] * nll[r];
      if (base) kacc.add(kt[r]);
      if (opt.keep_tokens) {
        KldToken t;
        t.nll = nll[r];
        res.tokens.push_back(base ? kt[r] : t);
      }
    }
    count += P.n_scored;
    res.running.push_back(std::exp(sum / double(count)));
    if (progress) {
      ChunkProgress pr;
      pr.chunk = ci + 1;
      pr.n_chunks = P.n_chunks;
      pr.seconds = std::chrono::duration<double>(clock::now() - t0).count();
      pr.tokens = int64_t(ci + 1) * P.ctx;
      pr.ppl = res.running.back();
      progress(pr);
    }
  }

  res.tokens_evaluated = int64_t(P.n_chunks) * P.ctx;
  res.tokens_scored = count;
  const PplStats st = ppl_from_sums(sum, sum2, count);
  res.mean_nll = st.mean_nll, res.ppl = st.ppl, res.ppl_err = st.ppl_err;
  if (base) res.kld = kacc.summary();
  res.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return res;
}

PplStats ppl_from_sums(double sum, double sum2, int64_t count) {
  PplStats s;
  if (count <= 0) return s;
  s.mean_nll = sum / double(count);
  s.ppl = std::exp(s.mean_nll);
  const double var = sum2 / double(count) - s.mean_nll * s.mean_nll;
  s.ppl_err = var > 0 && count > 1 ? std::sqrt(var / double(count - 1)) * s.ppl : 0.0;
  return s;
}

nlohmann::json ppl_result_json(const PplResult& r) {
  nlohmann::json j = {
      {"method", ppl_method_name(r.method)},
      {"ctx", r.plan.ctx},
      {"chunk_offset", r.plan.first_chunk},
      {"chunks", r.plan.n_chunks},
      {"tokens_text", r.n_tokens_text},
      {"tokens_evaluated", r.tokens_evaluated},
      {"tokens_scored", r.tokens_scored},
      {"mean_nll", r.mean_nll},
      {"ppl", r.ppl},
      {"ppl_err", r.ppl_err},
      {"eval_seconds", r.seconds},
      {"tokens_per_second", r.seconds > 0 ? double(r.tokens_evaluated) / r.seconds : 0.0},
      {"running_ppl", r.running},
      {"kv_cache", r.kv_name},
      {"kv_bytes_per_token", r.kv_bytes_per_token},
      {"kv_compression_vs_f16", r.kv_bytes_per_token > 0 ? r.kv_f16_bytes_per_token / r.kv_bytes_per_token : 0.0},
  };
  if (r.kld) j["kld"] = kld_summary_json(*r.kld);
  if (r.model_seconds > 0) {  // the CPU loop's split (above); the GPU path times the pair only
    j["model_eval_seconds"] = r.model_seconds;
    j["model_tokens_per_second"] = double(r.tokens_evaluated) / r.model_seconds;
  }
  if (r.base_seconds > 0) j["kl_base_eval_seconds"] = r.base_seconds;
  if (!r.tokens.empty()) {
    nlohmann::json nll = nlohmann::json::array(), nll_base = nlohmann::json::array(), kld = nlohmann::json::array(),
                   same = nlohmann::json::array();
    for (const KldToken& t : r.tokens) {
      nll.push_back(t.nll);
      if (!r.kld) continue;
      nll_base.push_back(t.nll_base);
      kld.push_back(t.kld);
      same.push_back(t.same_top ? 1 : 0);
    }
    j["token_stats"] = {{"nll", nll}};
    if (r.kld) {
      j["token_stats"]["nll_base"] = nll_base;
      j["token_stats"]["kld"] = kld;
      j["token_stats"]["same_top"] = same;
    }
  }
  return j;
}

}  // namespace qt
