// Two steps of the GPU forward (model.cpp): attention over the chunk's f16 K/V or through a
// quantized KV cache (kv.h), and the output head (final norm, lm_head GEMM in bf16 or int8, the
// final-logit soft-cap).
#include "formats/error.h"
#include "libquant/cuda/device_guard.h"
#include "libquant/cuda/int8_ops.h"
#include "libquant/cuda/model_impl.h"
#include "libquant/math/ops.h"

namespace qt::cuda {

void GpuModel::Impl::set_kv(const kv::KVConfig& kc) {
  const DeviceGuard on(device);
  bool f16 = true;
  for (size_t l = 0; l < kc.k.size(); ++l) f16 = f16 && kc.k[l].text() == "f16" && kc.v[l].text() == "f16";
  if (f16 && !kc.key_center && !kc.stats) {
    if (kvq) kvq.reset(), max_chunks = 0;
    return;
  }
  // The GPU's quantized caches attend causally over one RoPE table (kv.h): a model with sliding
  // windows, soft-caps, a second RoPE base or layers without RoPE keeps the f16 cache.
  if (!cfg.sliding.empty() || cfg.attn_softcap > 0 || cfg.rope_local_theta > 0 || !cfg.no_rope.empty() ||
      desc->attn_sinks)
    user_error(
        "a quantized KV cache with {}'s attention (sliding windows, soft-caps, per-layer RoPE, sinks): not on cuda yet",
        cfg.arch);
  kvq = std::make_unique<GpuKv>(kc, cfg.head_dim, ops::RopeTable(cfg).inv_freq());
  max_chunks = 0;  // the next reserve binds attention to the cache's buffers
}

void GpuModel::Impl::attend(int chunks, const Layer& L) {
  const float scale = cfg.attn_scale();
  if (!kvq) {
    attn->run(chunks, scale, stream, L.window, cfg.attn_softcap, L.sinks.bytes() ? L.sinks.get<float>() : nullptr);
    prof.mark("attention", stream);
    return;
  }
  kvq->prepare(q.get<__half>(), k.get<__half>(), v.get<__half>(), chunks, stream,
               first_layer + int(&L - layers.data()));
  prof.mark("kv encode/decode", stream);
  attn->run(chunks, scale, stream);
  prof.mark("attention", stream);
  kvq->finish(att.get<float>(), chunks, stream);
  prof.mark("kv encode/decode", stream);
}

void GpuModel::Impl::final_norm_rows(int chunks, int first, int n) {
  const DeviceGuard on(device);
  if (head_q8)
    rmsnorm_q8_rows(x.get<float>(), final_norm.get<float>(), chunks * n, cfg.hidden, cfg.rms_eps, n, T, first,
                    hq.get<int8_t>(), hsx.get<float>(), stream);
  else
    rmsnorm(x.get<float>(), final_norm.get<float>(), hs.get<bf16>(), chunks * n, cfg.hidden, cfg.rms_eps, n, T, first,
            stream);
  prof.mark("norm", stream);
}

void GpuModel::Impl::head(int r0, int rows) {
  const DeviceGuard on(device);
  if (rows > head_rows) throw std::logic_error("GpuModel: head of more rows than reserved");
  if (head_q8) {  // int32 sums into the logits buffer, then y = s_x · (s_w · acc) in place
    gemm->run_i8(head_codes.get<int8_t>(), cfg.vocab, cfg.hidden, hq.get<int8_t>() + size_t(r0) * cfg.hidden, rows,
                 logits.get<int32_t>(), stream);
    prof.mark("gemm lm_head", stream);
    dequant(logits.get<int32_t>(), rows, cfg.vocab, hsx.get<float>() + r0, head_scales.get<float>(),
            logits.get<float>(), false, stream);
    prof.mark("dequant", stream);
    final_softcap(rows);
    return;
  }
  gemm->run(head_weight(), cfg.vocab, cfg.hidden, hs.get<bf16>() + size_t(r0) * cfg.hidden, rows, logits.get(),
            CUDA_R_32F, false, stream);
  prof.mark("gemm lm_head", stream);
  final_softcap(rows);
}

void GpuModel::Impl::final_softcap(int rows) {
  if (cfg.final_softcap <= 0) return;
  softcap(logits.get<float>(), int64_t(rows) * cfg.vocab, cfg.final_softcap, stream);
  prof.mark("softcap", stream);
}

}  // namespace qt::cuda
