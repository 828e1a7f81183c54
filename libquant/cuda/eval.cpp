// The GPU's side of eval-ppl (a ChunkScorer, perplexity.h; the loop is the CPU's) and the logits
// of one sequence.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "formats/error.h"
#include "libquant/cuda/device_guard.h"
#include "libquant/cuda/model_impl.h"
#include "libquant/kv/cache.h"
#include "libquant/math/ops.h"

namespace qt::cuda {

int head_rows_for(const ModelConfig& c, int rows) {
  int64_t cap = std::max<int64_t>(1, (int64_t(1) << 31) / (int64_t(c.vocab) * 4));
  if (cap >= 16) cap &= ~int64_t(15);  // slices start 256-byte aligned (cuBLASLt's default assumption)
  return int(std::min<int64_t>(rows, cap));
}

void set_kv(GpuModel& m, const kv::KVConfig& cfg) {
  if (m.stages() > 1) {  // the pipeline keeps the f16 cache (a quantized one: set_kv refuses it)
    for (size_t l = 0; l < cfg.k.size(); ++l)
      if (cfg.k[l].text() != "f16" || cfg.v[l].text() != "f16" || cfg.key_center || cfg.stats)
        user_error("a quantized KV cache on several devices: not on cuda yet");
    return;
  }
  m.impl().set_kv(cfg);
}

int auto_batch(const GpuModel& m, int ctx) {
  int b = std::max(1, std::min(64, 32768 / std::max(1, ctx)));
  for (int s = 0; s < m.stages(); ++s) {  // the chunks every stage's device has room for
    const GpuModel::Impl& I = m.stage(s);
    const DeviceGuard on(I.device);
    size_t free_b = 0, total_b = 0;
    QT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t budget = size_t(double(free_b) * 0.7);
    while (b > 1 && I.scratch_bytes(b, ctx, I.has_head() ? head_rows_for(I.cfg, b * ctx) : 0) > budget) b /= 2;
  }
  return b;
}

namespace {

// The GPU's ChunkScorer: `batch` chunks per forward, the NLL (or, with a baseline, the KL row of
// both models' full-vocabulary log-softmax, kld.cu) of the scored rows computed on the GPU and
// only those values copied back.
class GpuScorer final : public ChunkScorer {
 public:
  GpuScorer(GpuModel& m, int batch, GpuModel* base) : I_(m.impl()), B_(base ? &base->impl() : nullptr), m_(m) {
    if (B_ && B_->cfg.vocab != I_.cfg.vocab)
      user_error("--kl-base-model: vocabulary of {} tokens, the model has {}", B_->cfg.vocab, I_.cfg.vocab);
    if (batch < 0) user_error("--batch: must be positive, got {}", batch);
    batch_ = batch;
  }
  const ModelConfig& config() const override { return I_.cfg; }
  bool has_base() const override { return B_ != nullptr; }

  int begin(const ChunkPlan& P, const PplOptions& opt, PplResult& res) override {
    const DeviceGuard on(I_.device);
    const ModelConfig& c = I_.cfg;
    P_ = P;
    // The KV cache: f16 (opt.kv empty, or f16 everywhere), or a quantized one on the GPU (kv.h;
    // what it does not run is a "not on cuda yet" UserError from set_kv).
    if (!opt.kv.k.empty())
      I_.set_kv(opt.kv);
    else
      I_.set_kv(kv::uniform_kv_config(c.n_layers, kv::parse_kv_spec("f16", "kv"), kv::parse_kv_spec("f16", "kv")));
    if (opt.ubatch > 0 && opt.ubatch < opt.ctx)
      user_error("--ubatch {}: not on cuda yet (cuda runs whole chunks)", opt.ubatch);
    const int B = std::min(batch_ > 0 ? batch_ : auto_batch(m_, P.ctx), P.n_chunks);
    const int rows_all = B * P.n_scored;
    I_.reserve(B, P.ctx, head_rows_for(c, rows_all));
    if (B_) {
      B_->reserve(B, P.ctx, head_rows_for(c, rows_all));
      kld_out_.resize(size_t(rows_all) * sizeof(KldRow));
      krows_.resize(size_t(rows_all));
    } else {
      nll_.resize(size_t(rows_all));
    }
    res.kv_name = "f16";
    res.kv_bytes_per_token = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * 2;
    if (I_.kvq) {  // the CPU cache's own name and bytes per token (the GPU stores the same codes)
      KVShape s;
      s.n_layers = c.n_layers, s.n_heads = c.n_heads, s.n_kv_heads = c.n_kv_heads, s.head_dim = c.head_dim;
      s.max_ctx = P.ctx, s.scale = c.attn_scale();
      s.rope_inv_freq = ops::RopeTable(c).inv_freq();
      const std::unique_ptr<KVCache> cpu = make_kv_cache(opt.kv, s);
      res.kv_name = cpu->name();
      res.kv_bytes_per_token = cpu->bytes_per_token();
    }
    QT_CUDA_CHECK(cudaStreamSynchronize(I_.stream));
    return B;
  }

  void score(const int32_t* ids, int, int nb, const int32_t* targets, KldToken* out, PplResult&) override {
    GpuModel::Impl& I = I_;
    const DeviceGuard on(I.device);
    const int rows = nb * P_.n_scored, V = I.cfg.vocab;
    I.forward(ids, nb);
    I.final_norm_rows(nb, P_.first, P_.n_scored);
    QT_CUDA_CHECK(cudaMemcpyAsync(I.target.get(), targets, size_t(rows) * 4, cudaMemcpyHostToDevice, I.stream));
    if (B_) {  // the baseline's hidden states of the same chunks, then both heads slice by slice
      B_->forward(ids, nb);
      B_->final_norm_rows(nb, P_.first, P_.n_scored);
      QT_CUDA_CHECK(cudaStreamSynchronize(B_->stream));
    }
    const int slice = B_ ? std::min(I.head_rows, B_->head_rows) : I.head_rows;
    for (int r0 = 0; r0 < rows; r0 += slice) {
      const int nr = std::min(slice, rows - r0);
      I.head(r0, nr);
      if (B_) {
        B_->head(r0, nr);
        QT_CUDA_CHECK(cudaStreamSynchronize(B_->stream));
        kld_rows(B_->logits.get<float>(), I.logits.get<float>(), nr, V, I.target.get<int32_t>() + r0,
                 kld_out_.get<KldRow>() + r0, I.stream);
        I.prof.mark("kld", I.stream);
      } else {
        token_nll(I.logits.get<float>(), nr, V, I.target.get<int32_t>() + r0, I.nll.get<double>() + r0, I.stream);
        I.prof.mark("nll", I.stream);
      }
    }
    if (B_)
      QT_CUDA_CHECK(cudaMemcpyAsync(krows_.data(), kld_out_.get(), size_t(rows) * sizeof(KldRow),
                                    cudaMemcpyDeviceToHost, I.stream));
    else
      QT_CUDA_CHECK(cudaMemcpyAsync(nll_.data(), I.nll.get(), size_t(rows) * 8, cudaMemcpyDeviceToHost, I.stream));
    QT_CUDA_CHECK(cudaStreamSynchronize(I.stream));
    I.prof.flush();
    if (B_) B_->prof.flush();
    for (int r = 0; r < rows; ++r) {
      KldToken t;
      if (B_) {
        const KldRow& k = krows_[size_t(r)];
        t.nll = k.nll, t.nll_base = k.nll_base, t.kld = k.kld, t.same_top = k.same_top != 0;
      } else {
        t.nll = nll_[size_t(r)];
      }
      out[r] = t;
    }
  }

 private:
  GpuModel::Impl& I_;
  GpuModel::Impl* B_;
  GpuModel& m_;
  int batch_ = 0;
  ChunkPlan P_;
  DeviceBuffer kld_out_;
  std::vector<KldRow> krows_;
  std::vector<double> nll_;
};

}  // namespace

std::unique_ptr<ChunkScorer> make_scorer(GpuModel& m, int batch, GpuModel* base) {
  if (m.stages() > 1) {
    if (base) user_error("--kl-base-model on several devices: not on cuda yet");
    return make_pipeline_scorer(m, batch);
  }
  if (base && base->impl().device != m.impl().device)
    throw std::logic_error("make_scorer: the baseline on another device than the model");
  return std::make_unique<GpuScorer>(m, batch, base);
}

PplResult evaluate_perplexity(GpuModel& m, const std::vector<int32_t>& tokens, const PplOptions& opt, int batch,
                              const ProgressFn& progress, GpuModel* base) {
  const std::unique_ptr<ChunkScorer> s = make_scorer(m, batch, base);
  return qt::evaluate_perplexity(*s, tokens, opt, progress);
}

}  // namespace qt::cuda
