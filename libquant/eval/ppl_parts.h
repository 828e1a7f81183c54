// A perplexity run split across processes: each part evaluates a range of chunks
// (eval-ppl --chunk-offset N --chunks M --token-stats) and keeps every scored position's NLL and
// KLD in its JSON; merging concatenates the positions in chunk order and recomputes every
// statistic with the same code as one run would — PPL, its error, the running estimates and the
// whole KLD summary, percentiles included — so the merged JSON equals the unsplit run's.
#pragma once
#include <vector>

#include <nlohmann/json.hpp>

namespace qt {

// UserError (naming `names[i]`) when a part lacks token_stats, the parts disagree on what they
// measured (model, text, method, ctx, KV cache, baseline) or their chunk ranges leave a gap or
// overlap. eval_seconds add up (tokens_per_second is per process); the result has no token_stats.
nlohmann::json merge_ppl_parts(std::vector<nlohmann::json> parts, const std::vector<std::string>& names);

}  // namespace qt
