// The perplexity loop for every device: the chunk plan, batches of chunks through a ChunkScorer
// (the device's forward, output head and per-row NLL / KLD), the sums in a fixed order.
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

PplResult evaluate_perplexity(ChunkScorer& scorer, const std::vector<int32_t>& tokens, const PplOptions& opt,
                              const ProgressFn& progress) {
  using clock = std::chrono::steady_clock;
  PplResult res;
  res.method = opt.method;
  res.plan = plan_chunks(opt.method, opt.ctx, int64_t(tokens.size()), opt.max_chunks, opt.first_chunk);
  res.n_tokens_text = int64_t(tokens.size());
  const ChunkPlan& P = res.plan;
  if (P.n_chunks == 0) user_error("--chunks 0: nothing to evaluate");
  const ModelConfig& c = scorer.config();
  res.kv_f16_bytes_per_token = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * 2;
  const bool kl = scorer.has_base();
  const int B = std::max(1, std::min(scorer.begin(P, opt, res), P.n_chunks));
  const auto t0 = clock::now();  // after the set-up (caches, scratch, GEMM tuning): evaluation only

  std::vector<int32_t> ids(size_t(B) * P.ctx), targets(size_t(B) * P.n_scored);
  std::vector<KldToken> rows(targets.size());
  double sum = 0, sum2 = 0;
  int64_t count = 0;
  KldAccumulator kacc;
  for (int c0 = 0; c0 < P.n_chunks; c0 += B) {
    const int nb = std::min(B, P.n_chunks - c0);
    for (int b = 0; b < nb; ++b) {
      const int32_t* src = tokens.data() + int64_t(P.first_chunk + c0 + b) * P.ctx;
      std::copy(src, src + P.ctx, ids.begin() + size_t(b) * P.ctx);
      if (opt.method == PplMethod::Llama && opt.bos_id >= 0) ids[size_t(b) * P.ctx] = opt.bos_id;
      std::copy(src + P.first + 1, src + P.first + 1 + P.n_scored, targets.begin() + size_t(b) * P.n_scored);
    }
    scorer.score(ids.data(), c0, nb, targets.data(), rows.data(), res);
    for (int b = 0; b < nb; ++b) {  // fixed order, chunk by chunk: sums independent of threads and batch
      for (int r = 0; r < P.n_scored; ++r) {
        const KldToken& t = rows[size_t(b) * P.n_scored + r];
        sum += t.nll;
        sum2 += t.nll * t.nll;
        if (kl) kacc.add(t);
        if (opt.keep_tokens) res.tokens.push_back(t);
      }
      count += P.n_scored;
      res.running.push_back(std::exp(sum / double(count)));
    }
    if (progress) {
      ChunkProgress pr;
      pr.chunk = c0 + nb;
      pr.n_chunks = P.n_chunks;
      pr.seconds = std::chrono::duration<double>(clock::now() - t0).count();
      pr.tokens = int64_t(c0 + nb) * P.ctx;
      pr.ppl = res.running.back();
      progress(pr);
    }
  }

  res.tokens_evaluated = int64_t(P.n_chunks) * P.ctx;
  res.tokens_scored = count;
  const PplStats st = ppl_from_sums(sum, sum2, count);
  res.mean_nll = st.mean_nll, res.ppl = st.ppl, res.ppl_err = st.ppl_err;
  if (kl) res.kld = kacc.summary();
  res.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return res;
}

PplResult evaluate_perplexity(LlamaModel& model, const std::vector<int32_t>& tokens, const PplOptions& opt,
                              LlamaModel* base, const ProgressFn& progress) {
  const std::unique_ptr<ChunkScorer> s = make_cpu_scorer(model, base);
  return evaluate_perplexity(*s, tokens, opt, progress);
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
