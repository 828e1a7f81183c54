// The CPU's ChunkScorer (perplexity.h): one chunk per call through LlamaModel — the forward in
// calls of ubatch tokens appending to the KV cache, the output head in slices of head_rows rows,
// each row's NLL (and KLD against the baseline's logits) in parallel.
#include <chrono>

#include "formats/error.h"
#include "libquant/eval/perplexity.h"

namespace qt {

namespace {

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
    kv::KVConfig kvc = opt.kv;
    if (kvc.k.empty()) {  // no per-layer methods given: the f32 cache (key centering still applies)
      const kv::KVSpec f32 = kv::parse_kv_spec("f32", "kv");
      kvc.k.assign(size_t(c.n_layers), f32);
      kvc.v.assign(size_t(c.n_layers), f32);
    }
    cache_ = model_.make_cache(P_.ctx, kvc);
    if (base_) base_cache_ = base_->make_cache(P_.ctx, opt.base_kv);
    res.kv_name = cache_->name();
    res.kv_bytes_per_token = cache_->bytes_per_token();
    ub_ = opt.ubatch > 0 ? std::min(opt.ubatch, P_.ctx) : P_.ctx;
    hidden_.assign(ub_ < P_.ctx ? size_t(P_.ctx) * c.hidden : 0, 0.0f);
    slice_ = std::max(1, std::min(opt.head_rows, P_.n_scored));
    logits_.resize(size_t(slice_) * c.vocab);
    base_logits_.resize(base_ ? size_t(slice_) * c.vocab : 0);
    bh_ = base_ ? base_->config().hidden : 0;
    per_chunk_ = size_t(P_.n_scored) * size_t(bh_);
    fill_ = base_ && opt.base_hidden && opt.base_hidden->empty();
    reuse_ = base_ && opt.base_hidden && !fill_;
    if (reuse_ && opt.base_hidden->size() != size_t(P_.n_chunks) * per_chunk_)
      user_error("KL baseline hidden states: {} floats kept, {} needed", opt.base_hidden->size(),
                 size_t(P_.n_chunks) * per_chunk_);
    if (fill_) opt.base_hidden->reserve(size_t(P_.n_chunks) * per_chunk_);
    return 1;
  }

  void score(const int32_t* ids, int chunk0, int nb, const int32_t* targets, KldToken* out, PplResult& res) override {
    for (int b = 0; b < nb; ++b)
      one_chunk(ids + size_t(b) * P_.ctx, chunk0 + b, targets + size_t(b) * P_.n_scored, out + size_t(b) * P_.n_scored,
                res);
  }

 private:
  using clock = std::chrono::steady_clock;

  // The chunk's final hidden states, in forward calls of ub_ tokens.
  const float* run_chunk(const int32_t* toks) {
    cache_->clear();
    if (ub_ >= P_.ctx) return model_.forward_hidden(toks, P_.ctx, 0, *cache_);
    const int64_t H = model_.config().hidden;
    for (int p0 = 0; p0 < P_.ctx; p0 += ub_) {
      const int n = std::min(ub_, P_.ctx - p0);
      const float* h = model_.forward_hidden(toks + p0, n, p0, *cache_);
      std::copy(h, h + size_t(n) * H, hidden_.begin() + size_t(p0) * H);
    }
    return hidden_.data();
  }

  void one_chunk(const int32_t* toks, int ci, const int32_t* targets, KldToken* out, PplResult& res) {
    const ModelConfig& c = model_.config();
    const int V = c.vocab;
    // Each model's forward and head timed on its own: a KL run reports the evaluated model's
    // speed, not that of the pair.
    auto t = clock::now();
    auto lap = [&](double& acc) {
      const auto now = clock::now();
      acc += std::chrono::duration<double>(now - t).count();
      t = now;
    };
    const float* h = run_chunk(toks);
    lap(res.model_seconds);
    const float* hb = nullptr;  // the baseline's hidden state at the first scored row
    if (reuse_) {
      hb = opt_->base_hidden->data() + size_t(ci) * per_chunk_;
    } else if (base_) {
      base_cache_->clear();
      hb = base_->forward_hidden(toks, P_.ctx, 0, *base_cache_) + int64_t(P_.first) * bh_;
      if (fill_) opt_->base_hidden->insert(opt_->base_hidden->end(), hb, hb + per_chunk_);
      lap(res.base_seconds);
    }
    for (int r0 = 0; r0 < P_.n_scored; r0 += slice_) {
      const int nr = std::min(slice_, P_.n_scored - r0);
      const int row = P_.first + r0;  // position of the first logit row of this slice
      t = clock::now();
      model_.output_head(h + int64_t(row) * c.hidden, nr, logits_.data());
      lap(res.model_seconds);
      if (base_) {
        base_->output_head(hb + int64_t(r0) * bh_, nr, base_logits_.data());
        lap(res.base_seconds);
      }
#pragma omp parallel for schedule(dynamic, 4)
      for (int r = 0; r < nr; ++r) {
        const int target = targets[r0 + r];
        const float* lt = logits_.data() + size_t(r) * V;
        if (base_) {
          out[r0 + r] = kld_token(base_logits_.data() + size_t(r) * V, lt, V, target);
        } else {
          out[r0 + r] = KldToken();
          out[r0 + r].nll = token_nll(lt, V, target);
        }
      }
    }
  }

  LlamaModel& model_;
  LlamaModel* base_;
  ChunkPlan P_;
  const PplOptions* opt_ = nullptr;
  std::unique_ptr<KVCache> cache_, base_cache_;
  int ub_ = 0, slice_ = 0;
  int64_t bh_ = 0;
  size_t per_chunk_ = 0;
  bool fill_ = false, reuse_ = false;
  std::vector<float> hidden_, logits_, base_logits_;
};

}  // namespace

std::unique_ptr<ChunkScorer> make_cpu_scorer(LlamaModel& model, LlamaModel* base) {
  return std::make_unique<CpuScorer>(model, base);
}

}  // namespace qt
