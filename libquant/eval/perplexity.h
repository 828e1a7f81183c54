// Perplexity over a tokenized text, by one of two published protocols (docs/spec/perplexity.md),
// optionally with the KL divergence against a baseline model run alongside (kld.h).
//
//  llama  — llama.cpp llama-perplexity: chunks of ctx tokens [i·ctx, (i+1)·ctx), each from an
//           empty cache; the first token of a chunk replaced by BOS when the tokenizer adds one;
//           logits of positions ctx/2 … ctx−2 score the tokens at ctx/2+1 … ctx−1.
//  chunks — GPTQ / AWQ / SmoothQuant: the same non-overlapping chunks, no BOS replacement,
//           every token but the first of each chunk scored.
// NLL per token = log Σ_v exp(l_v) − l_target, summed in double; PPL = exp(mean) and its error
// σ·PPL with σ = sqrt((mean(nll²) − mean²)/(count−1)), as llama-perplexity prints it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "libquant/eval/kld.h"
#include "libquant/model/llama.h"

namespace qt {

enum class PplMethod { Llama, Chunks };
const char* ppl_method_name(PplMethod m);

// Which positions of which chunks are scored.
struct ChunkPlan {
  int ctx = 0;
  int first_chunk = 0;  // chunks before it are skipped (a part of a split run, ppl_parts.h)
  int n_chunks = 0;
  int first = 0;     // first logit row scored in a chunk
  int n_scored = 0;  // scored rows per chunk: rows first … first+n_scored−1 predict the next token
};
// UserError when the text has fewer than 2·ctx tokens (llama.cpp's rule, kept for both methods)
// or first_chunk is past the last whole chunk.
ChunkPlan plan_chunks(PplMethod method, int ctx, int64_t n_tokens, int max_chunks, int first_chunk = 0);

struct PplOptions {
  PplMethod method = PplMethod::Llama;
  int ctx = 512;
  int max_chunks = -1;          // < 0: every whole chunk
  int first_chunk = 0;          // start at this chunk (one part of a run split across processes)
  bool keep_tokens = false;     // keep every scored position's NLL (and KLD) in PplResult::tokens
  int bos_id = -1;              // llama method: replaces each chunk's first token (−1: no BOS added)
  kv::KVConfig kv;              // KV cache of the model (no layers given: f32)
  std::string base_kv = "f32";  // KV cache of the KL baseline
  int ubatch = 0;               // tokens per forward call (0: the whole chunk); the cache sees each
                                // batch appended before its queries attend
  int head_rows = 256;          // output-head slice: rows of logits held at once (memory bound)
  int chunk_parallel = 0;       // CPU: chunks scored at once, each by its share of the threads
                                // (0: auto_chunk_parallel's choice)
  // The KL baseline's final hidden states at the scored rows, chunk after chunk (n_chunks ·
  // n_scored · hidden floats). Empty: filled as the baseline runs. Full: read instead of running
  // the baseline's forward (its output head still runs, so the KLD is the same to the bit).
  std::vector<float>* base_hidden = nullptr;
};

struct ChunkProgress {
  int chunk = 0;  // chunks done
  int n_chunks = 0;
  double seconds = 0;  // since the evaluation started
  int64_t tokens = 0;  // tokens evaluated so far
  double ppl = 0;      // running estimate, llama.cpp's [i] value
};
using ProgressFn = std::function<void(const ChunkProgress&)>;

struct PplResult {
  PplMethod method = PplMethod::Llama;
  ChunkPlan plan;
  int64_t n_tokens_text = 0;     // tokens of the whole text
  int64_t tokens_evaluated = 0;  // n_chunks · ctx
  int64_t tokens_scored = 0;
  double mean_nll = 0, ppl = 0, ppl_err = 0;
  double seconds = 0;                 // evaluation only (not loading or tokenizing)
  double model_seconds = 0;           // of those, the evaluated model's own forward and output head
  double base_seconds = 0;            // and the KL baseline's (0 without one)
  std::vector<double> running;        // PPL after each chunk
  std::optional<KldSummary> kld;      // when a baseline ran
  std::vector<KldToken> tokens;       // with keep_tokens: each scored position in order (nll only
                                      // without a baseline)
  std::string kv_name;                // the model's cache, as it describes itself
  double kv_bytes_per_token = 0;      // everything it stores at ctx positions, per position
  double kv_f16_bytes_per_token = 0;  // an fp16 cache of the same model
  int chunk_parallel = 0;             // CPU: chunks that ran at once (0: the device does not say)
  double bytes_per_chunk = 0;         // CPU: what each of them holds (caches, activations, logits)
};

// A device's side of the evaluation: the model (and the KL baseline, when there is one) running
// whole chunks and scoring their rows — the forward, the output head and the per-row NLL / KLD.
// The CPU (make_cpu_scorer below) and the GPU (libquant/cuda/backend.h) implement it; the loop
// around it (evaluate_perplexity: the chunk plan, the BOS rule, batches of chunks, the sums in a
// fixed order, the running PPL, the KLD summary) is one for every device.
class ChunkScorer {
 public:
  virtual ~ChunkScorer() = default;
  virtual const ModelConfig& config() const = 0;
  virtual bool has_base() const = 0;
  // Once, before the first chunk: the KV cache and scratch for the plan; sets res.kv_name,
  // res.kv_bytes_per_token (and may refuse, UserError, what the device does not run). Returns
  // how many chunks one score() call takes.
  virtual int begin(const ChunkPlan& plan, const PplOptions& opt, PplResult& res) = 0;
  // Runs nb chunks (ids [nb, ctx], each a fresh sequence from position 0; chunk0: the plan index
  // of the first) and fills out[nb · n_scored], chunk by chunk, row by row: the NLL of the row's
  // target (targets, same order), and with a baseline its NLL, the KLD and whether the top tokens
  // agree. Adds the evaluated model's own time to res.model_seconds and the baseline's to
  // res.base_seconds where the device times them apart.
  virtual void score(const int32_t* ids, int chunk0, int nb, const int32_t* targets, KldToken* out, PplResult& res) = 0;
};

// Runs the scorer over the chunks of `tokens`. The accumulation order is fixed, so results do not
// depend on the thread count or the chunks per call.
PplResult evaluate_perplexity(ChunkScorer& scorer, const std::vector<int32_t>& tokens, const PplOptions& opt,
                              const ProgressFn& progress = {});

// How many chunks the CPU scores at once with `threads` threads: as many teams as leave each
// thread of a team enough of a chunk's work to keep it busy between the team's barriers
// (kMacsPerTeamThread in cpu_scorer.cpp), at least 1.
int auto_chunk_parallel(const ModelConfig& c, int threads);

// The CPU's scorer: opt.chunk_parallel chunks per call (auto_chunk_parallel's when 0), each on
// its share of num_threads() with its own caches and scratch (a chunk's results do not depend on
// its thread count, so neither do the sums); the cache per opt.kv (f32 where it gives no layers),
// the baseline's with opt.base_kv, forward calls of opt.ubatch tokens, the output head in slices
// of opt.head_rows rows, opt.base_hidden kept or read. The models must outlive it and have no
// observer set.
std::unique_ptr<ChunkScorer> make_cpu_scorer(LlamaModel& model, LlamaModel* base = nullptr);

// evaluate_perplexity with make_cpu_scorer(model, base).
PplResult evaluate_perplexity(LlamaModel& model, const std::vector<int32_t>& tokens, const PplOptions& opt,
                              LlamaModel* base = nullptr, const ProgressFn& progress = {});

// Refuses (UserError naming base_path) a KL baseline that is not the same model: another
// architecture or shape, another vocabulary, or a tokenizer that splits the text differently.
void check_kl_baseline(const ModelConfig& model, const ModelConfig& base, const std::string& base_path,
                       const std::vector<int32_t>& ids, const std::vector<int32_t>& base_ids);

// The per-token NLL of one row of logits (log-sum-exp in double, llama.cpp's formula).
double token_nll(const float* logits, int n_vocab, int target);

// PPL, its error and the mean NLL from the sums of nll and nll² over count positions.
struct PplStats {
  double mean_nll = 0, ppl = 0, ppl_err = 0;
};
PplStats ppl_from_sums(double sum, double sum2, int64_t count);

// With kept tokens, "token_stats" holds them (nll, nll_base, kld, same_top arrays), which is
// what merge_ppl_parts reads back.
nlohmann::json ppl_result_json(const PplResult& r);

}  // namespace qt
