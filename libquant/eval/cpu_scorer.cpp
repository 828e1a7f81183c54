// The CPU's ChunkScorer (perplexity.h): chunks through LlamaModel — the forward in calls of ubatch
// tokens appending to the KV cache, the output head in slices of head_rows rows, each row's NLL
// (and KLD against the baseline's logits) in parallel. Several chunks may run at once, each in a
// team of threads of its own (ThreadTeams) with its own caches, scratch and logits: one chunk of a
// small model leaves each of many threads too little work between the team's barriers.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "formats/error.h"
#include "libquant/eval/perplexity.h"
#include "libquant/parallel.h"
#include "libquant/thread_teams.h"

namespace qt {

namespace {

// The multiply-adds a token costs in the projections and the output head (the weights' work,
// without attention).
double macs_per_token(const ModelConfig& c) {
  const double H = c.hidden, Q = double(c.n_heads) * c.head_dim, KV = double(c.n_kv_heads) * c.head_dim;
  double ffn = 3.0 * H * c.intermediate;
  if (c.is_moe()) ffn = 3.0 * H * c.moe_intermediate * c.n_experts_per_tok + H * c.n_experts;
  return c.n_layers * (H * (Q + 2 * KV) + Q * H + ffn) + H * c.vocab;
}

// A team's threads keep scaling while each has about this many of a token's multiply-adds: on the
// 16-core Xeon, SmolLM2-135M (0.13 G a token) scored one chunk at a time gained up to 4 threads
// for W8A8 and affine-4 and lost from 8 on (results/bench.md, "Threads on a server").
constexpr double kMacsPerTeamThread = 32e6;

class CpuScorer final : public ChunkScorer {
 public:
  CpuScorer(LlamaModel& model, LlamaModel* base) : model_(model), base_(base) {
    if (base && base->config().vocab != model.config().vocab)
      user_error("--kl-base-model: vocabulary of {} tokens, the model has {}", base->config().vocab,
                 model.config().vocab);
  }
  const ModelConfig& config() const override { return model_.config(); }
  bool has_base() const override { return base_ != nullptr; }

  int begin(const ChunkPlan& plan, const PplOptions& opt, PplResult& res) override {
    P_ = plan;
    opt_ = &opt;
    const ModelConfig& c = model_.config();
    kvc_ = opt.kv;
    if (kvc_.k.empty()) {  // no per-layer methods given: the f32 cache (key centering still applies)
      const kv::KVSpec f32 = kv::parse_kv_spec("f32", "kv");
      kvc_.k.assign(size_t(c.n_layers), f32);
      kvc_.v.assign(size_t(c.n_layers), f32);
    }
    if (opt.chunk_parallel < 0) user_error("--chunk-parallel: must be positive, got {}", opt.chunk_parallel);
    const int threads = std::max(1, num_threads());
    // --kv-stats sums every chunk's statistics as it goes: one at a time keeps their order.
    int n = opt.chunk_parallel > 0 ? opt.chunk_parallel : opt.kv.stats ? 1 : auto_chunk_parallel(c, threads);
    n = std::max(1, std::min({n, threads, P_.n_chunks}));
    ub_ = opt.ubatch > 0 ? std::min(opt.ubatch, P_.ctx) : P_.ctx;
    slice_ = std::max(1, std::min(opt.head_rows, P_.n_scored));
    bh_ = base_ ? base_->config().hidden : 0;
    per_chunk_ = size_t(P_.n_scored) * size_t(bh_);
    fill_ = base_ && opt.base_hidden && opt.base_hidden->empty();
    reuse_ = base_ && opt.base_hidden && !fill_;
    if (reuse_ && opt.base_hidden->size() != size_t(P_.n_chunks) * per_chunk_)
      user_error("KL baseline hidden states: {} floats kept, {} needed", opt.base_hidden->size(),
                 size_t(P_.n_chunks) * per_chunk_);
    if (fill_) opt.base_hidden->assign(size_t(P_.n_chunks) * per_chunk_, 0.0f);  // each chunk writes its own
    // Forwards that run at once only read the RoPE tables.
    model_.reserve_positions(P_.ctx);
    if (base_) base_->reserve_positions(P_.ctx);

    slots_.clear();
    slots_.resize(size_t(n));
    teams_.reset();
    if (n > 1) {
      teams_ = std::make_unique<ThreadTeams>(ThreadTeams::split(threads, n));
      teams_->run(n, [&](int i) { make_slot(slots_[size_t(i)]); });  // each team touches its own memory first
    } else {
      make_slot(slots_[0]);
    }
    const Slot& s = slots_[0];
    res.kv_name = s.cache->name();
    res.kv_bytes_per_token = s.cache->bytes_per_token();
    res.chunk_parallel = n;
    res.bytes_per_chunk = s.cache->bytes_per_token() * P_.ctx + double(model_.scratch_bytes(ub_)) +
                          4.0 * double(s.hidden.size() + s.logits.size() + s.base_logits.size());
    if (base_) res.bytes_per_chunk += s.base_cache->bytes_per_token() * P_.ctx + double(base_->scratch_bytes(P_.ctx));
    return n;
  }

  void score(const int32_t* ids, int chunk0, int nb, const int32_t* targets, KldToken* out, PplResult& res) override {
    auto chunk = [&](Slot& s, int b) {
      one_chunk(s, ids + size_t(b) * P_.ctx, chunk0 + b, targets + size_t(b) * P_.n_scored,
                out + size_t(b) * P_.n_scored);
    };
    if (!teams_) {
      for (int b = 0; b < nb; ++b) {
        chunk(slots_[0], b);
        res.model_seconds += slots_[0].model_s;
        res.base_seconds += slots_[0].base_s;
      }
      return;
    }
    // The chunks ran side by side: the batch's wall time is shared out in the proportion of the
    // time every team spent in each model.
    const auto t0 = clock::now();
    teams_->run(nb, [&](int b) { chunk(slots_[size_t(b)], b); });
    const double wall = std::chrono::duration<double>(clock::now() - t0).count();
    double m = 0, bs = 0, busy = 0;
    for (int b = 0; b < nb; ++b) {
      m += slots_[size_t(b)].model_s;
      bs += slots_[size_t(b)].base_s;
      busy += slots_[size_t(b)].busy_s;
    }
    if (busy > 0) {
      res.model_seconds += wall * m / busy;
      res.base_seconds += wall * bs / busy;
    }
  }

 private:
  using clock = std::chrono::steady_clock;

  // What one chunk in flight holds.
  struct Slot {
    std::unique_ptr<KVCache> cache, base_cache;
    ForwardScratch scratch, base_scratch;
    std::vector<float> hidden, logits, base_logits;
    double model_s = 0, base_s = 0, busy_s = 0;  // the last chunk's
  };

  void make_slot(Slot& s) const {
    const ModelConfig& c = model_.config();
    s.cache = model_.make_cache(P_.ctx, kvc_);
    if (base_) s.base_cache = base_->make_cache(P_.ctx, opt_->base_kv);
    s.hidden.assign(ub_ < P_.ctx ? size_t(P_.ctx) * c.hidden : 0, 0.0f);
    s.logits.assign(size_t(slice_) * c.vocab, 0.0f);
    s.base_logits.assign(base_ ? size_t(slice_) * c.vocab : 0, 0.0f);
  }

  // The chunk's final hidden states, in forward calls of ub_ tokens.
  const float* run_chunk(Slot& s, const int32_t* toks) {
    s.cache->clear();
    if (ub_ >= P_.ctx) return model_.forward_hidden(toks, P_.ctx, 0, *s.cache, s.scratch);
    const int64_t H = model_.config().hidden;
    for (int p0 = 0; p0 < P_.ctx; p0 += ub_) {
      const int n = std::min(ub_, P_.ctx - p0);
      const float* h = model_.forward_hidden(toks + p0, n, p0, *s.cache, s.scratch);
      std::copy(h, h + size_t(n) * H, s.hidden.begin() + size_t(p0) * H);
    }
    return s.hidden.data();
  }

  void one_chunk(Slot& s, const int32_t* toks, int ci, const int32_t* targets, KldToken* out) {
    const ModelConfig& c = model_.config();
    const int V = c.vocab;
    s.model_s = s.base_s = 0;
    // Each model's forward and head timed on its own: a KL run reports the evaluated model's
    // speed, not that of the pair.
    const auto start = clock::now();
    auto t = start;
    auto lap = [&](double& acc) {
      const auto now = clock::now();
      acc += std::chrono::duration<double>(now - t).count();
      t = now;
    };
    const float* h = run_chunk(s, toks);
    lap(s.model_s);
    const float* hb = nullptr;  // the baseline's hidden state at the first scored row
    if (reuse_) {
      hb = opt_->base_hidden->data() + size_t(ci) * per_chunk_;
    } else if (base_) {
      s.base_cache->clear();
      hb = base_->forward_hidden(toks, P_.ctx, 0, *s.base_cache, s.base_scratch) + int64_t(P_.first) * bh_;
      if (fill_) std::copy(hb, hb + per_chunk_, opt_->base_hidden->begin() + ptrdiff_t(size_t(ci) * per_chunk_));
      lap(s.base_s);
    }
    for (int r0 = 0; r0 < P_.n_scored; r0 += slice_) {
      const int nr = std::min(slice_, P_.n_scored - r0);
      const int row = P_.first + r0;  // position of the first logit row of this slice
      t = clock::now();
      model_.output_head(h + int64_t(row) * c.hidden, nr, s.logits.data());
      lap(s.model_s);
      if (base_) {
        base_->output_head(hb + int64_t(r0) * bh_, nr, s.base_logits.data());
        lap(s.base_s);
      }
#pragma omp parallel for schedule(dynamic, 4)
      for (int r = 0; r < nr; ++r) {
        const int target = targets[r0 + r];
        const float* lt = s.logits.data() + size_t(r) * V;
        if (base_) {
          out[r0 + r] = kld_token(s.base_logits.data() + size_t(r) * V, lt, V, target);
        } else {
          out[r0 + r] = KldToken();
          out[r0 + r].nll = token_nll(lt, V, target);
        }
      }
    }
    s.busy_s = std::chrono::duration<double>(clock::now() - start).count();
  }

  LlamaModel& model_;
  LlamaModel* base_;
  ChunkPlan P_;
  const PplOptions* opt_ = nullptr;
  kv::KVConfig kvc_;
  int ub_ = 0, slice_ = 0;
  int64_t bh_ = 0;
  size_t per_chunk_ = 0;
  bool fill_ = false, reuse_ = false;
  std::vector<Slot> slots_;
  std::unique_ptr<ThreadTeams> teams_;  // with more than one slot: team i runs slot i's chunks
};

}  // namespace

int auto_chunk_parallel(const ModelConfig& c, int threads) {
  const int team = std::max(1, int(std::lround(macs_per_token(c) / kMacsPerTeamThread)));
  return std::max(1, threads / team);
}

std::unique_ptr<ChunkScorer> make_cpu_scorer(LlamaModel& model, LlamaModel* base) {
  return std::make_unique<CpuScorer>(model, base);
}

}  // namespace qt
