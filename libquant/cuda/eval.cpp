// eval-ppl's loop with the forward on the GPU: the CPU's plan (plan_chunks), BOS rule and fixed-
// order accumulation (perplexity.cpp), `batch` chunks per forward, the NLL of the scored rows
// computed on the GPU and only those doubles copied back.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "formats/error.h"
#include "libquant/cuda/model_impl.h"
#include "libquant/kv/cache.h"
#include "libquant/math/ops.h"

namespace qt::cuda {

namespace {
// Rows of logits held at once: at most 2 GiB of them.
int head_rows_for(const ModelConfig& c, int rows) {
  int64_t cap = std::max<int64_t>(1, (int64_t(1) << 31) / (int64_t(c.vocab) * 4));
  if (cap >= 16) cap &= ~int64_t(15);  // slices start 256-byte aligned (cuBLASLt's default assumption)
  return int(std::min<int64_t>(rows, cap));
}
}  // namespace

void set_kv(GpuModel& m, const kv::KVConfig& cfg) { m.impl().set_kv(cfg); }

int auto_batch(const GpuModel& m, int ctx) {
  const GpuModel::Impl& I = const_cast<GpuModel&>(m).impl();
  size_t free_b = 0, total_b = 0;
  QT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const size_t budget = size_t(double(free_b) * 0.7);
  int b = std::max(1, std::min(64, 32768 / std::max(1, ctx)));
  while (b > 1 && I.scratch_bytes(b, ctx, head_rows_for(I.cfg, b * ctx)) > budget) b /= 2;
  return b;
}

PplResult evaluate_perplexity(GpuModel& m, const std::vector<int32_t>& tokens, const PplOptions& opt, int batch,
                              const ProgressFn& progress, GpuModel* base) {
  using clock = std::chrono::steady_clock;
  GpuModel::Impl& I = m.impl();
  const ModelConfig& c = I.cfg;
  GpuModel::Impl* Bm = base ? &base->impl() : nullptr;
  if (Bm && Bm->cfg.vocab != c.vocab)
    user_error("--kl-base-model: vocabulary of {} tokens, the model has {}", Bm->cfg.vocab, c.vocab);
  // The KV cache: f16 (opt.kv empty, or f16 everywhere), or a quantized one on the GPU (kv.h;
  // what it does not run is a "not on cuda yet" UserError from set_kv).
  if (!opt.kv.k.empty())
    I.set_kv(opt.kv);
  else
    I.set_kv(kv::uniform_kv_config(c.n_layers, kv::parse_kv_spec("f16", "kv"), kv::parse_kv_spec("f16", "kv")));
  if (opt.ubatch > 0 && opt.ubatch < opt.ctx)
    user_error("--ubatch {}: not on cuda yet (cuda runs whole chunks)", opt.ubatch);

  PplResult res;
  res.method = opt.method;
  res.plan = plan_chunks(opt.method, opt.ctx, int64_t(tokens.size()), opt.max_chunks, opt.first_chunk);
  res.n_tokens_text = int64_t(tokens.size());
  const ChunkPlan& P = res.plan;
  if (P.n_chunks == 0) user_error("--chunks 0: nothing to evaluate");
  if (batch < 0) user_error("--batch: must be positive, got {}", batch);
  const int B = std::min(batch > 0 ? batch : auto_batch(m, P.ctx), P.n_chunks);
  const int rows_all = B * P.n_scored;
  I.reserve(B, P.ctx, head_rows_for(c, rows_all));
  DeviceBuffer kld_out;
  if (Bm) {
    Bm->reserve(B, P.ctx, head_rows_for(c, rows_all));
    kld_out.resize(size_t(rows_all) * sizeof(KldRow));
  }
  std::vector<KldRow> krows(Bm ? size_t(rows_all) : 0);
  KldAccumulator kacc;
  res.kv_name = "f16";
  res.kv_bytes_per_token = res.kv_f16_bytes_per_token = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * 2;
  if (I.kvq) {  // the CPU cache's own name and bytes per token (the GPU stores the same codes)
    KVShape s;
    s.n_layers = c.n_layers, s.n_heads = c.n_heads, s.n_kv_heads = c.n_kv_heads, s.head_dim = c.head_dim;
    s.max_ctx = P.ctx, s.scale = c.attn_scale();
    s.rope_inv_freq = ops::RopeTable(c).inv_freq();
    const std::unique_ptr<KVCache> cpu = make_kv_cache(opt.kv, s);
    res.kv_name = cpu->name();
    res.kv_bytes_per_token = cpu->bytes_per_token();
  }

  std::vector<int32_t> ids(size_t(B) * P.ctx), tgt(static_cast<size_t>(rows_all));
  std::vector<double> nll(static_cast<size_t>(rows_all));
  double sum = 0, sum2 = 0;
  int64_t count = 0;
  QT_CUDA_CHECK(cudaStreamSynchronize(I.stream));
  const auto t0 = clock::now();
  for (int c0 = 0; c0 < P.n_chunks; c0 += B) {
    const int nb = std::min(B, P.n_chunks - c0), rows = nb * P.n_scored;
    for (int b = 0; b < nb; ++b) {
      const int32_t* src = tokens.data() + int64_t(P.first_chunk + c0 + b) * P.ctx;
      std::copy(src, src + P.ctx, ids.begin() + size_t(b) * P.ctx);
      if (opt.method == PplMethod::Llama && opt.bos_id >= 0) ids[size_t(b) * P.ctx] = opt.bos_id;
      for (int r = 0; r < P.n_scored; ++r) tgt[size_t(b) * P.n_scored + r] = src[P.first + r + 1];
    }
    I.forward(ids.data(), nb);
    I.final_norm_rows(nb, P.first, P.n_scored);
    QT_CUDA_CHECK(cudaMemcpyAsync(I.target.get(), tgt.data(), size_t(rows) * 4, cudaMemcpyHostToDevice, I.stream));
    if (Bm) {  // the baseline's hidden states of the same chunks, then both heads slice by slice
      Bm->forward(ids.data(), nb);
      Bm->final_norm_rows(nb, P.first, P.n_scored);
      QT_CUDA_CHECK(cudaStreamSynchronize(Bm->stream));
    }
    const int slice = Bm ? std::min(I.head_rows, Bm->head_rows) : I.head_rows;
    for (int r0 = 0; r0 < rows; r0 += slice) {
      const int nr = std::min(slice, rows - r0);
      I.head(r0, nr);
      if (Bm) {
        Bm->head(r0, nr);
        QT_CUDA_CHECK(cudaStreamSynchronize(Bm->stream));
        kld_rows(Bm->logits.get<float>(), I.logits.get<float>(), nr, c.vocab, I.target.get<int32_t>() + r0,
                 kld_out.get<KldRow>() + r0, I.stream);
        I.prof.mark("kld", I.stream);
      } else {
        token_nll(I.logits.get<float>(), nr, c.vocab, I.target.get<int32_t>() + r0, I.nll.get<double>() + r0, I.stream);
        I.prof.mark("nll", I.stream);
      }
    }
    if (Bm) {
      QT_CUDA_CHECK(cudaMemcpyAsync(krows.data(), kld_out.get(), size_t(rows) * sizeof(KldRow), cudaMemcpyDeviceToHost,
                                    I.stream));
      QT_CUDA_CHECK(cudaStreamSynchronize(I.stream));
      for (int r = 0; r < rows; ++r) nll[size_t(r)] = krows[size_t(r)].nll;
    } else {
      QT_CUDA_CHECK(cudaMemcpyAsync(nll.data(), I.nll.get(), size_t(rows) * 8, cudaMemcpyDeviceToHost, I.stream));
    }
    QT_CUDA_CHECK(cudaStreamSynchronize(I.stream));
    I.prof.flush();
    if (Bm) Bm->prof.flush();
    for (int b = 0; b < nb; ++b) {  // the CPU's order: chunk by chunk, row by row
      for (int r = 0; r < P.n_scored; ++r) {
        const size_t i = size_t(b) * P.n_scored + r;
        const double x = nll[i];
        sum += x;
        sum2 += x * x;
        KldToken t;
        t.nll = x;
        if (Bm) {
          t.nll_base = krows[i].nll_base, t.kld = krows[i].kld, t.same_top = krows[i].same_top != 0;
          kacc.add(t);
        }
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
  if (Bm) res.kld = kacc.summary();
  res.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return res;
}

std::vector<float> forward_logits(GpuModel& m, const std::vector<int32_t>& ids) {
  GpuModel::Impl& I = m.impl();
  const int n = int(ids.size()), V = I.cfg.vocab;
  if (n <= 0) user_error("no tokens to run");
  I.reserve(1, n, head_rows_for(I.cfg, n));
  I.forward(ids.data(), 1);
  I.final_norm_rows(1, 0, n);
  std::vector<float> out(size_t(n) * V);
  for (int r0 = 0; r0 < n; r0 += I.head_rows) {
    const int nr = std::min(I.head_rows, n - r0);
    I.head(r0, nr);
    QT_CUDA_CHECK(cudaMemcpyAsync(out.data() + size_t(r0) * V, I.logits.get(), size_t(nr) * V * 4,
                                  cudaMemcpyDeviceToHost, I.stream));
    QT_CUDA_CHECK(cudaStreamSynchronize(I.stream));
  }
  return out;
}

}  // namespace qt::cuda
