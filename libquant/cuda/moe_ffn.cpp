// The GPU's mixture-of-experts FFN (a sparse layer of qwen3_moe, every mixtral layer), the CPU's
// LlamaModel::moe_ffn (libquant/model/llama.cpp) on the device:
//
//   logits = xb · routerᵀ                        (one GEMM, fp32 out)
//   per token: its K experts and weights         (moe_route: softmax in fp32, torch.topk's order,
//                                                  the family's renormalisation)
//   (token, expert) pairs sorted by expert        (counts, prefix sum, a stable fill: moe.h)
//   xg = the pairs' rows of xb, gathered          (each expert's rows contiguous)
//   per expert with rows: gu = xg_e · [gate_e; up_e]ᵀ, then SwiGLU over every row, then
//   per expert: y_e = h_e · down_eᵀ              (one cuBLASLt bf16 GEMM each, GemmLt::run_rows)
//   x += Σ_e w_e · y_e per token, experts in ascending order (moe_combine)
//
// The host reads back only the E counts and offsets (one small copy per layer) to size each
// expert's GEMM; there is no per-token host loop.
#include <algorithm>

#include "libquant/cuda/moe.h"
#include "libquant/cuda/model_impl.h"

namespace qt::cuda {

size_t GpuModel::Impl::moe_scratch_bytes(size_t N) const {
  if (!cfg.is_moe()) return 0;
  const size_t E = size_t(cfg.n_experts), K = size_t(cfg.n_experts_per_tok), H = size_t(cfg.hidden),
               FE = size_t(cfg.moe_intermediate), NK = N * K;
  return N * E * 4 + NK * 12 + (2 * E + 1) * 4 + NK * H * 2 + NK * std::max(2 * FE, H) * 4 + NK * FE * 2;
}

void GpuModel::Impl::moe_reserve(size_t N) {
  if (!cfg.is_moe()) return;
  const size_t E = size_t(cfg.n_experts), K = size_t(cfg.n_experts_per_tok), H = size_t(cfg.hidden),
               FE = size_t(cfg.moe_intermediate), NK = N * K;
  moe_logits.resize(N * E * 4);
  moe_sel.resize(NK * 4);
  moe_w.resize(NK * 4);
  moe_slot.resize(NK * 4);
  moe_cnt.resize((2 * E + 1) * 4);
  moe_xg.resize(NK * H * 2);
  moe_y.resize(NK * std::max(2 * FE, H) * 4);
  moe_hb.resize(NK * FE * 2);
  moe_host.resize(2 * E + 1);
}

void GpuModel::Impl::moe_ffn(const Layer& L, int N) {
  const ModelConfig& c = cfg;
  const int H = c.hidden, E = c.n_experts, K = c.n_experts_per_tok, FE = c.moe_intermediate;
  gemm->run(L.router.get<bf16>(), E, H, xb.get<bf16>(), N, moe_logits.get(), CUDA_R_32F, false, stream);
  prof.mark("gemm router", stream);
  int32_t* cnt = moe_cnt.get<int32_t>();
  QT_CUDA_CHECK(cudaMemsetAsync(cnt, 0, size_t(E) * 4, stream));
  // norm_topk_prob: config.json's, or always for mixtral (set at load, model_config)
  moe_route(moe_logits.get<float>(), N, E, K, desc->moe->gpt_oss, c.norm_topk_prob, moe_sel.get<int32_t>(),
            moe_w.get<float>(), cnt, stream);
  moe_offsets(cnt, E, cnt + E, stream);
  moe_fill(moe_sel.get<int32_t>(), N * K, E, cnt + E, moe_slot.get<int32_t>(), stream);
  moe_gather(xb.get<bf16>(), N, K, H, moe_slot.get<int32_t>(), moe_xg.get<bf16>(), stream);
  prof.mark("moe route", stream);
  QT_CUDA_CHECK(cudaMemcpyAsync(moe_host.data(), cnt, moe_host.size() * 4, cudaMemcpyDeviceToHost, stream));
  QT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int32_t* count = moe_host.data();
  const int32_t* off = count + E;
  const bf16* wgu = L.wgu.get<bf16>();
  const bf16* wdown = L.wdown.get<bf16>();
  float* y = moe_y.get<float>();
  for (int e = 0; e < E; ++e)
    gemm->run_rows(wgu + size_t(e) * 2 * FE * H, 2 * FE, H, moe_xg.get<bf16>() + size_t(off[e]) * H, count[e],
                   y + size_t(off[e]) * 2 * FE, stream);
  prof.mark("gemm experts gate|up", stream);
  swiglu(y, N * K, FE, moe_hb.get<bf16>(), stream);
  prof.mark("swiglu", stream);
  for (int e = 0; e < E; ++e)
    gemm->run_rows(wdown + size_t(e) * H * FE, H, FE, moe_hb.get<bf16>() + size_t(off[e]) * FE, count[e],
                   y + size_t(off[e]) * H, stream);
  prof.mark("gemm experts down", stream);
  const bool post_norm = L.ffn_post.bytes() != 0;
  moe_combine(y, N, K, H, moe_sel.get<int32_t>(), moe_w.get<float>(), moe_slot.get<int32_t>(),
              post_norm ? post.get<float>() : x.get<float>(), !post_norm, stream);
  prof.mark("moe combine", stream);
  if (post_norm) post_norm_add(post.get<float>(), L.ffn_post.get<float>(), x.get<float>(), N, H, c.rms_eps, stream);
}

}  // namespace qt::cuda
