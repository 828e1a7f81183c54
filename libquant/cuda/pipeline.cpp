// A model on several devices (eval-ppl --device cuda:0,1): its layers split into pipeline stages,
// one a device in order, and the chunks of a batch pipelined through them.
//
// Each stage is a GpuModel::Impl holding its layers (the first the embedding, the last the final
// norm, output head and NLL) with its own stream, cuBLASLt handle and scratch on its device. A
// batch is cut into micro-batches of `micro` chunks; stage s runs micro-batch j while stage s + 1
// runs j − 1. The hand-over is asynchronous, the host enqueues everything and waits once at the
// end of the batch:
//
//   stage s:     layers(j) → [wait inbox free] → peer copy x → inbox of s+1 → record sent
//   stage s + 1: [wait sent] → copy inbox → x → record inbox free → layers(j) …
//
// The inbox (fp32 rows, on the receiving device) gives the sender one micro-batch of slack: it
// waits only until the receiver has taken the previous hand-over, not until it has run it. The
// rows are the fp32 residual stream, so a stage sees exactly the values one device would: with
// the same GEMM shapes (--batch chunks per micro-batch on both) the NLL is bitwise the same.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "formats/error.h"
#include "libquant/cuda/device_guard.h"
#include "libquant/cuda/model_impl.h"

namespace qt::cuda {

namespace {

// The stage boundaries [0 = b0 < b1 < … < bS = n_layers) for S stages. The split balances time:
// a layer costs its multiply-adds per token (q|k|v, o, and gate|up, down or, for a sparse layer,
// the router and the top-k experts' share), the output head vocab × hidden at half of them (eval-ppl
// scores the second half of each chunk's rows) on the last stage; each boundary goes where the
// cumulative cost comes closest to s/S of the total. Memory is not balanced separately: weights
// follow the same multiply-adds, so equal devices get equal shares; a stage that does not fit its
// GPU is the usual out-of-memory error.
std::vector<int> split_layers(const ModelConfig& c, int S) {
  if (S > c.n_layers) user_error("--device: {} stages for {} layers (at most one stage a layer)", S, c.n_layers);
  const double H = c.hidden, attn = H * (double(c.n_heads) * c.head_dim * 2 + 2.0 * c.n_kv_heads * c.head_dim);
  std::vector<double> cum(size_t(c.n_layers) + 1, 0.0);
  for (int i = 0; i < c.n_layers; ++i) {
    const double ffn = c.is_moe_layer(i) ? H * (c.n_experts + 3.0 * c.n_experts_per_tok * c.moe_intermediate)
                                         : 3.0 * H * c.intermediate;
    cum[size_t(i) + 1] = cum[size_t(i)] + attn + ffn;
  }
  const double total = cum.back() + 0.5 * double(c.vocab) * H;
  std::vector<int> b{0};
  for (int s = 1; s < S; ++s) {
    const double want = total * s / S;
    int best = b.back() + 1;  // at least one layer a stage, and room for the stages after
    for (int i = best; i <= c.n_layers - (S - s); ++i)
      if (std::abs(cum[size_t(i)] - want) < std::abs(cum[size_t(best)] - want)) best = i;
    b.push_back(best);
  }
  b.push_back(c.n_layers);
  return b;
}

}  // namespace

GpuModel::GpuModel(Checkpoint&& ck, bool fused_attention, const std::vector<int>& devices) {
  if (devices.empty()) throw std::logic_error("GpuModel: no device");
  const std::vector<int> b = split_layers(ck.config, int(devices.size()));
  // The hand-over writes into the next stage's memory from the sender's stream: peer access where
  // the pair has it (NVLink or PCIe P2P); cudaMemcpyPeerAsync stages through the host elsewhere.
  for (size_t s = 0; s + 1 < devices.size(); ++s) {
    const int a = devices[s], n = devices[s + 1];
    int can = 0;
    if (a == n || cudaDeviceCanAccessPeer(&can, a, n) != cudaSuccess || !can) continue;
    const DeviceGuard on(a);
    const cudaError_t e = cudaDeviceEnablePeerAccess(n, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
      cudaGetLastError();
    else
      QT_CUDA_CHECK(e);
  }
  for (size_t s = 0; s < devices.size(); ++s)
    stages_.push_back(std::make_unique<Impl>(ck, fused_attention, devices[s], b[s], b[s + 1]));
}

std::string GpuModel::describe_stages() const {
  std::string out;
  for (const auto& s : stages_)
    out +=
        fmt::format("{}layers {}-{} on cuda:{}", out.empty() ? "" : ", ", s->first_layer, s->last_layer - 1, s->device);
  return out;
}

// Micro-batches as many chunks as fit every stage (auto_batch), cut so that the text makes at least
// 16 per stage: the pipeline's fill and drain (S − 1 micro-batches idle on each stage a batch)
// stay a few percent of the run.
int pipeline_micro_batch(const GpuModel& m, int ctx, int n_chunks) {
  const int S = m.stages();
  return std::max(1, std::min(auto_batch(m, ctx), (n_chunks + 16 * S - 1) / (16 * S)));
}

namespace {

class PipelineScorer final : public ChunkScorer {
 public:
  PipelineScorer(GpuModel& m, int batch) : m_(m), S_(m.stages()) {
    if (batch < 0) user_error("--batch: must be positive, got {}", batch);
    batch_ = batch;
  }
  ~PipelineScorer() override {
    for (int s = 0; s < S_; ++s) {
      const DeviceGuard on(m_.stage(s).device);
      if (sent_.size() > size_t(s) && sent_[size_t(s)]) cudaEventDestroy(sent_[size_t(s)]);
      if (freed_.size() > size_t(s) && freed_[size_t(s)]) cudaEventDestroy(freed_[size_t(s)]);
      if (s < int(inbox_.size())) inbox_[size_t(s)] = DeviceBuffer();
    }
    const DeviceGuard first(m_.stage(0).device);
    ids_ = DeviceBuffer();
    const DeviceGuard last(m_.stage(S_ - 1).device);
    targets_ = DeviceBuffer(), nll_dev_ = DeviceBuffer();
  }
  const ModelConfig& config() const override { return m_.config(); }
  bool has_base() const override { return false; }

  int begin(const ChunkPlan& P, const PplOptions& opt, PplResult& res) override {
    const ModelConfig& c = m_.config();
    P_ = P;
    if (!opt.kv.k.empty()) set_kv(m_, opt.kv);  // the f16 cache only: refuses a quantized one
    if (opt.ubatch > 0 && opt.ubatch < opt.ctx)
      user_error("--ubatch {}: not on cuda yet (cuda runs whole chunks)", opt.ubatch);
    micro_ = std::max(1, std::min(batch_ > 0 ? batch_ : pipeline_micro_batch(m_, P.ctx, P.n_chunks), P.n_chunks));
    const int B = std::min(P.n_chunks, micro_ * 64 * S_);
    const size_t xrow = size_t(P.ctx) * c.hidden * 4;
    sent_.assign(size_t(S_), nullptr), freed_.assign(size_t(S_), nullptr);
    inbox_.clear();
    inbox_.resize(size_t(S_));
    for (int s = 0; s < S_; ++s) {
      GpuModel::Impl& I = m_.stage(s);
      I.reserve(micro_, P.ctx, I.has_head() ? head_rows_for(c, micro_ * P.n_scored) : 0);
      const DeviceGuard on(I.device);
      if (s + 1 < S_) QT_CUDA_CHECK(cudaEventCreateWithFlags(&sent_[size_t(s)], cudaEventDisableTiming));
      if (s > 0) {
        QT_CUDA_CHECK(cudaEventCreateWithFlags(&freed_[size_t(s)], cudaEventDisableTiming));
        inbox_[size_t(s)].resize(size_t(micro_) * xrow);
      }
      if (s == 0) ids_.resize(size_t(B) * P.ctx * 4);
      if (s + 1 == S_) {
        targets_.resize(size_t(B) * P.n_scored * 4);
        nll_dev_.resize(size_t(B) * P.n_scored * 8);
      }
      QT_CUDA_CHECK(cudaStreamSynchronize(I.stream));
    }
    nll_.resize(size_t(B) * P.n_scored);
    res.kv_name = "f16";
    res.kv_bytes_per_token = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * 2;
    return B;
  }

  void score(const int32_t* ids, int, int nb, const int32_t* targets, KldToken* out, PplResult&) override {
    const ModelConfig& c = m_.config();
    const int T = P_.ctx, ns = P_.n_scored, rows = nb * ns;
    check_token_ids(ids, int64_t(nb) * T, c.vocab);
    GpuModel::Impl &first = m_.stage(0), &last = m_.stage(S_ - 1);
    {  // the batch's ids and targets up front (the streams are idle: nothing waits on the host)
      const DeviceGuard on(first.device);
      QT_CUDA_CHECK(cudaMemcpy(ids_.get(), ids, size_t(nb) * T * 4, cudaMemcpyHostToDevice));
    }
    {
      const DeviceGuard on(last.device);
      QT_CUDA_CHECK(cudaMemcpy(targets_.get(), targets, size_t(rows) * 4, cudaMemcpyHostToDevice));
    }
    const size_t xrow = size_t(T) * c.hidden * 4;
    for (int c0 = 0, j = 0; c0 < nb; c0 += micro_, ++j) {
      const int mj = std::min(micro_, nb - c0);
      for (int s = 0; s < S_; ++s) {
        GpuModel::Impl& I = m_.stage(s);
        const DeviceGuard on(I.device);
        I.prof.start(I.stream);
        if (s == 0) {
          I.embed_tokens(ids_.get<int32_t>() + size_t(c0) * T, mj);
        } else {  // take the hand-over: the inbox into x, then the sender may refill it
          QT_CUDA_CHECK(cudaStreamWaitEvent(I.stream, sent_[size_t(s - 1)], 0));
          QT_CUDA_CHECK(cudaMemcpyAsync(I.x.get(), inbox_[size_t(s)].get(), size_t(mj) * xrow, cudaMemcpyDeviceToDevice,
                                        I.stream));
          QT_CUDA_CHECK(cudaEventRecord(freed_[size_t(s)], I.stream));
          I.prof.mark("hand-over", I.stream);
        }
        I.run_layers(mj);
        if (s + 1 < S_) {  // hand x to the next stage once it has taken the previous micro-batch
          GpuModel::Impl& N = m_.stage(s + 1);
          if (j > 0) QT_CUDA_CHECK(cudaStreamWaitEvent(I.stream, freed_[size_t(s + 1)], 0));
          QT_CUDA_CHECK(cudaMemcpyPeerAsync(inbox_[size_t(s + 1)].get(), N.device, I.x.get(), I.device,
                                            size_t(mj) * xrow, I.stream));
          QT_CUDA_CHECK(cudaEventRecord(sent_[size_t(s)], I.stream));
          I.prof.mark("hand-over", I.stream);
          continue;
        }
        I.final_norm_rows(mj, P_.first, ns);
        const int r = mj * ns, off = c0 * ns;
        for (int r0 = 0; r0 < r; r0 += I.head_rows) {
          const int nr = std::min(I.head_rows, r - r0);
          I.head(r0, nr);
          token_nll(I.logits.get<float>(), nr, c.vocab, targets_.get<int32_t>() + off + r0,
                    nll_dev_.get<double>() + off + r0, I.stream);
          I.prof.mark("nll", I.stream);
        }
      }
    }
    {
      const DeviceGuard on(last.device);
      QT_CUDA_CHECK(
          cudaMemcpyAsync(nll_.data(), nll_dev_.get(), size_t(rows) * 8, cudaMemcpyDeviceToHost, last.stream));
    }
    for (int s = 0; s < S_; ++s) {
      GpuModel::Impl& I = m_.stage(s);
      const DeviceGuard on(I.device);
      QT_CUDA_CHECK(cudaStreamSynchronize(I.stream));
      I.prof.flush();
    }
    for (int i = 0; i < rows; ++i) {
      out[i] = KldToken();
      out[i].nll = nll_[size_t(i)];
    }
  }

 private:
  GpuModel& m_;
  const int S_;
  int batch_ = 0, micro_ = 1;
  ChunkPlan P_;
  std::vector<cudaEvent_t> sent_, freed_;  // per stage: its hand-over sent; its inbox taken
  std::vector<DeviceBuffer> inbox_;        // per stage after the first: fp32 [micro · ctx, hidden]
  DeviceBuffer ids_, targets_, nll_dev_;   // the batch's ids (first stage), targets and NLL (last)
  std::vector<double> nll_;
};

}  // namespace

std::unique_ptr<ChunkScorer> make_pipeline_scorer(GpuModel& m, int batch) {
  return std::make_unique<PipelineScorer>(m, batch);
}

// One sequence through the stages in turn (one device, or several without pipelining: one
// micro-batch), then the head slice by slice.
std::vector<float> forward_logits(GpuModel& m, const std::vector<int32_t>& ids) {
  const int n = int(ids.size()), S = m.stages();
  if (n <= 0) user_error("no tokens to run");
  GpuModel::Impl& last = m.stage(S - 1);
  for (int s = 0; s < S; ++s) {
    GpuModel::Impl& I = m.stage(s);
    I.reserve(1, n, I.has_head() ? head_rows_for(I.cfg, n) : 0);
    if (s == 0) {
      I.forward(ids.data(), 1);
    } else {
      const GpuModel::Impl& P = m.stage(s - 1);
      {
        const DeviceGuard on(P.device);
        QT_CUDA_CHECK(cudaStreamSynchronize(P.stream));
      }
      const DeviceGuard on(I.device);
      QT_CUDA_CHECK(
          cudaMemcpyPeerAsync(I.x.get(), I.device, P.x.get(), P.device, size_t(n) * I.cfg.hidden * 4, I.stream));
      I.run_layers(1);
    }
  }
  const DeviceGuard on(last.device);
  last.final_norm_rows(1, 0, n);
  const int V = last.cfg.vocab;
  std::vector<float> out(size_t(n) * V);
  for (int r0 = 0; r0 < n; r0 += last.head_rows) {
    const int nr = std::min(last.head_rows, n - r0);
    last.head(r0, nr);
    QT_CUDA_CHECK(cudaMemcpyAsync(out.data() + size_t(r0) * V, last.logits.get(), size_t(nr) * V * 4,
                                  cudaMemcpyDeviceToHost, last.stream));
    QT_CUDA_CHECK(cudaStreamSynchronize(last.stream));
  }
  return out;
}

}  // namespace qt::cuda
