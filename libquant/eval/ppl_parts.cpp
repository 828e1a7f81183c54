#include "libquant/eval/ppl_parts.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "formats/error.h"
#include "libquant/eval/kld.h"
#include "libquant/eval/perplexity.h"

namespace qt {

using nlohmann::json;

json merge_ppl_parts(std::vector<json> parts, const std::vector<std::string>& names) {
  if (parts.empty()) user_error("--merge: no parts given");
  std::vector<size_t> order(parts.size());
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = 0; i < parts.size(); ++i) {
    const json& p = parts[i];
    if (!p.contains("token_stats") || !p.contains("chunk_offset") || !p.contains("chunks"))
      user_error("{}: no token_stats (run eval-ppl with --token-stats)", names[i]);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return parts[a]["chunk_offset"].get<int>() < parts[b]["chunk_offset"].get<int>();
  });
  // What every part must share for the positions to belong to one run.
  static const char* kSame[] = {"method", "ctx",          "tokens_text",   "kv_cache",   "kv_bytes_per_token",
                                "model",  "text",         "kl_base_model", "kl_base_kv", "compute",
                                "ubatch", "bos_per_chunk"};
  const json& first = parts[order[0]];
  const bool has_kld = first.contains("kld");
  int next = first["chunk_offset"].get<int>();
  double sum = 0, sum2 = 0, seconds = 0, model_seconds = 0, base_seconds = 0, wall = 0, rss = 0;
  int64_t count = 0, evaluated = 0;
  int chunks = 0;
  std::vector<double> running;
  KldAccumulator kacc;
  for (size_t k : order) {
    const json& p = parts[k];
    for (const char* key : kSame)
      if (p.value(key, json()) != first.value(key, json()))
        user_error("{}: its {} differs from {}'s", names[k], key, names[order[0]]);
    if (p.contains("kld") != has_kld) user_error("{}: KLD in some parts and not in others", names[k]);
    const int off = p["chunk_offset"].get<int>(), n = p["chunks"].get<int>();
    if (off != next) user_error("{}: starts at chunk {}, the parts before it end at chunk {}", names[k], off, next);
    next = off + n;
    const json& ts = p["token_stats"];
    const auto nll = ts.at("nll").get<std::vector<double>>();
    const int64_t scored = p["tokens_scored"].get<int64_t>();
    if (int64_t(nll.size()) != scored || n <= 0 || scored % n != 0)
      user_error("{}: token_stats has {} positions for {} scored in {} chunks", names[k], nll.size(), scored, n);
    std::vector<double> nll_base, kld;
    std::vector<int> same;
    if (has_kld) {
      nll_base = ts.at("nll_base").get<std::vector<double>>();
      kld = ts.at("kld").get<std::vector<double>>();
      same = ts.at("same_top").get<std::vector<int>>();
      if (nll_base.size() != nll.size() || kld.size() != nll.size() || same.size() != nll.size())
        user_error("{}: token_stats arrays of different lengths", names[k]);
    }
    const int64_t per_chunk = scored / n;
    for (size_t i = 0; i < nll.size(); ++i) {  // the same order and sums as one run
      sum += nll[i];
      sum2 += nll[i] * nll[i];
      ++count;
      if (has_kld) {
        KldToken t;
        t.nll = nll[i], t.nll_base = nll_base[i], t.kld = kld[i], t.same_top = same[i] != 0;
        kacc.add(t);
      }
      if (count % per_chunk == 0) running.push_back(std::exp(sum / double(count)));
    }
    chunks += n;
    evaluated += p["tokens_evaluated"].get<int64_t>();
    seconds += p.value("eval_seconds", 0.0);
    model_seconds += p.value("model_eval_seconds", 0.0);
    base_seconds += p.value("kl_base_eval_seconds", 0.0);
    wall += p.value("wall_seconds", 0.0);
    rss = std::max(rss, p.value("peak_rss_mib", 0.0));
  }
  json out = first;
  out.erase("token_stats");
  const PplStats st = ppl_from_sums(sum, sum2, count);
  out["chunks"] = chunks;
  out["tokens_evaluated"] = evaluated;
  out["tokens_scored"] = count;
  out["mean_nll"] = st.mean_nll;
  out["ppl"] = st.ppl;
  out["ppl_err"] = st.ppl_err;
  out["running_ppl"] = running;
  if (has_kld) out["kld"] = kld_summary_json(kacc.summary());
  out["eval_seconds"] = seconds;
  out["tokens_per_second"] = seconds > 0 ? double(evaluated) / seconds : 0.0;
  if (first.contains("model_eval_seconds")) {
    out["model_eval_seconds"] = model_seconds;
    out["model_tokens_per_second"] = model_seconds > 0 ? double(evaluated) / model_seconds : 0.0;
  }
  if (first.contains("kl_base_eval_seconds")) out["kl_base_eval_seconds"] = base_seconds;
  if (first.contains("wall_seconds")) out["wall_seconds"] = wall;
  if (first.contains("peak_rss_mib")) out["peak_rss_mib"] = rss;
  out["merged_parts"] = parts.size();
  return out;
}

}  // namespace qt
