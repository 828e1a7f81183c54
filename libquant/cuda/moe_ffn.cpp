// The GPU's mixture-of-experts FFN (a sparse layer of qwen3_moe, every mixtral and gpt_oss layer),
// the CPU's LlamaModel::moe_ffn (libquant/model/llama.cpp) on the device:
//
//   logits = xb · routerᵀ (+ bias)               (one GEMM, fp32 out; the router stays bf16)
//   per token: its K experts and weights         (moe_route: softmax in fp32, torch.topk's order,
//                                                  the family's renormalisation; gpt_oss: top-k
//                                                  of the logits, then their softmax)
//   (token, expert) pairs sorted by expert        (counts, aligned offsets, a stable fill: moe.h)
//   per expert with rows: gu = xg_e · [gate_e; up_e]ᵀ (+ biases), the activation (SwiGLU, or
//   gpt_oss's clamped one), y_e = h_e · down_eᵀ (+ bias)
//   x += Σ_e w_e · y_e per token, experts in ascending order (moe_combine)
//
// The experts' GEMMs follow the dense projections' kind:
//   bf16           one cuBLASLt bf16 GEMM per active expert on its slice of the stacked matrix;
//   affine / NF4   the expert's slice decoded into the bf16 scratch (wdec), then the bf16 GEMM —
//                  the dense path's decode kernels, per active expert, so an inactive expert
//                  costs nothing and the scratch holds one expert's matrix;
//   W8A8 / FP8     the gathered rows' per-token 8-bit codes (the normed rows' own, quantized once
//                  per token as the CPU's IntLinear quantizes its input rows) times the expert's
//                  codes on the 8-bit tensor cores, the epilogue with the expert's channel scales;
//                  the activation in fp32, quantized per token for the down GEMM.
// The host reads back only the E counts and offsets (one small copy per layer) to size each
// expert's GEMM; there is no per-token host loop.
#include <algorithm>
#include <type_traits>

#include "libquant/cuda/int8_ops.h"
#include "libquant/cuda/model_impl.h"
#include "libquant/cuda/moe.h"

namespace qt::cuda {

namespace {
struct MoeDims {
  size_t E, K, H, FE, NK, rows;  // rows: the expert-sorted rows with the segments' alignment gaps
};
MoeDims moe_dims(const ModelConfig& c, size_t N) {
  const size_t E = size_t(c.n_experts), K = size_t(c.n_experts_per_tok);
  return {E, K, size_t(c.hidden), size_t(c.moe_intermediate), N * K, N * K + E * size_t(kMoeRowAlign)};
}
}  // namespace

size_t GpuModel::Impl::moe_scratch_bytes(size_t N) const {
  if (!cfg.is_moe()) return 0;
  const MoeDims d = moe_dims(cfg, N);
  size_t b = N * d.E * 4 + d.NK * 12 + (2 * d.E + 1) * 4 + d.rows * d.H * 2 + d.rows * std::max(2 * d.FE, d.H) * 4 +
             d.rows * d.FE * 2;
  if (q8) b += d.rows * (std::max(d.H, d.FE) + 4 + std::max(2 * d.FE, d.H) * 4 + d.FE * 4);
  return b;
}

void GpuModel::Impl::moe_reserve(size_t N) {
  if (!cfg.is_moe()) return;
  const MoeDims d = moe_dims(cfg, N);
  moe_logits.resize(N * d.E * 4);
  moe_sel.resize(d.NK * 4);
  moe_w.resize(d.NK * 4);
  moe_slot.resize(d.NK * 4);
  moe_cnt.resize((2 * d.E + 1) * 4);
  moe_xg.resize(d.rows * d.H * 2);
  moe_y.resize(d.rows * std::max(2 * d.FE, d.H) * 4);
  moe_hb.resize(d.rows * d.FE * 2);
  moe_host.resize(2 * d.E + 1);
  if (q8) {
    moe_q.resize(d.rows * std::max(d.H, d.FE));
    moe_qs.resize(d.rows * 4);
    moe_acc.resize(d.rows * std::max(2 * d.FE, d.H) * 4);
    moe_hf.resize(d.rows * d.FE * 4);
  }
}

const int32_t* GpuModel::Impl::moe_route_rows(const Layer& L, int N) {
  const ModelConfig& c = cfg;
  const int H = c.hidden, E = c.n_experts, K = c.n_experts_per_tok;
  gemm->run(L.router.get<bf16>(), E, H, xb.get<bf16>(), N, moe_logits.get(), CUDA_R_32F, false, stream);
  if (L.brouter.bytes()) add_bias(moe_logits.get<float>(), L.brouter.get<float>(), N, E, stream);
  prof.mark("gemm router", stream);
  int32_t* cnt = moe_cnt.get<int32_t>();
  QT_CUDA_CHECK(cudaMemsetAsync(cnt, 0, size_t(E) * 4, stream));
  // norm_topk_prob: config.json's, or always for mixtral (set at load, model_config)
  moe_route(moe_logits.get<float>(), N, E, K, desc->moe->gpt_oss, c.norm_topk_prob, moe_sel.get<int32_t>(),
            moe_w.get<float>(), cnt, stream);
  moe_offsets(cnt, E, cnt + E, stream);
  moe_fill(moe_sel.get<int32_t>(), N * K, E, cnt + E, moe_slot.get<int32_t>(), stream);
  prof.mark("moe route", stream);
  QT_CUDA_CHECK(cudaMemcpyAsync(moe_host.data(), cnt, moe_host.size() * 4, cudaMemcpyDeviceToHost, stream));
  QT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return moe_host.data();
}

const bf16* GpuModel::Impl::expert_weight(const Layer& L, int e, bool gate_up) {
  const int64_t H = cfg.hidden, FE = cfg.moe_intermediate;
  const int64_t rows = gate_up ? 2 * FE : H, row0 = int64_t(e) * rows;
  const AffineWeight& a = gate_up ? L.agu : L.adown;
  const Bnb4Weight& n = gate_up ? L.ngu : L.ndown;
  if (!a.empty()) {
    affine_dequant_rows(a, row0, rows, wdec.get<bf16>(), stream);
    return wdec.get<bf16>();
  }
  if (!n.empty()) {
    bnb4_dequant_rows(n, row0, rows, wdec.get<bf16>(), stream);
    return wdec.get<bf16>();
  }
  return (gate_up ? L.wgu : L.wdown).get<bf16>() + row0 * (gate_up ? H : FE);
}

void GpuModel::Impl::moe_ffn(const Layer& L, int N) {
  const ModelConfig& c = cfg;
  const int H = c.hidden, E = c.n_experts, K = c.n_experts_per_tok, FE = c.moe_intermediate;
  const int32_t* count = moe_route_rows(L, N);
  const int32_t* off = count + E;
  const int32_t* offs_d = moe_cnt.get<int32_t>() + E;
  const int rows = off[E];
  moe_gather(xb.get<bf16>(), N, K, size_t(H) * 2, moe_slot.get<int32_t>(), moe_xg.get<bf16>(), stream);
  prof.mark("moe route", stream);
  const bool decode = affine || bnb4;
  float* y = moe_y.get<float>();
  for (int e = 0; e < E; ++e)
    if (count[e])
      gemm->run_rows(expert_weight(L, e, true), 2 * FE, H, moe_xg.get<bf16>() + size_t(off[e]) * H, count[e],
                     y + size_t(off[e]) * 2 * FE, stream);
  prof.mark(decode ? "decode + gemm experts gate|up" : "gemm experts gate|up", stream);
  moe_bias(y, rows, 2 * FE, offs_d, E, L.bgu.bytes() ? L.bgu.get<float>() : nullptr, stream);
  expert_act(y, rows, FE, moe_hb.get<bf16>(), nullptr, desc->moe->gpt_oss, c.swiglu_alpha, c.swiglu_limit, stream);
  prof.mark("swiglu", stream);
  for (int e = 0; e < E; ++e)
    if (count[e])
      gemm->run_rows(expert_weight(L, e, false), H, FE, moe_hb.get<bf16>() + size_t(off[e]) * FE, count[e],
                     y + size_t(off[e]) * H, stream);
  prof.mark(decode ? "decode + gemm experts down" : "gemm experts down", stream);
  moe_bias(y, rows, H, offs_d, E, L.bdown.bytes() ? L.bdown.get<float>() : nullptr, stream);
  const bool post_norm = L.ffn_post.bytes() != 0;
  moe_combine(y, N, K, H, moe_sel.get<int32_t>(), moe_w.get<float>(), moe_slot.get<int32_t>(),
              post_norm ? post.get<float>() : x.get<float>(), !post_norm, stream);
  prof.mark("moe combine", stream);
  if (post_norm) post_norm_add(post.get<float>(), L.ffn_post.get<float>(), x.get<float>(), N, H, c.rms_eps, stream);
}

template <typename C, typename A>
void GpuModel::Impl::moe_ffn_q8(const Layer& L, int N, const C* a, const float* sa) {
  const ModelConfig& c = cfg;
  const int H = c.hidden, E = c.n_experts, K = c.n_experts_per_tok, FE = c.moe_intermediate;
  constexpr bool f8 = std::is_same_v<C, e4m3>;
  const int32_t* count = moe_route_rows(L, N);
  const int32_t* off = count + E;
  const int32_t* offs_d = moe_cnt.get<int32_t>() + E;
  const int rows = off[E];
  C* q = moe_q.get<C>();
  float* qs = moe_qs.get<float>();
  moe_gather(a, N, K, size_t(H), moe_slot.get<int32_t>(), q, stream);
  moe_gather(sa, N, K, 4, moe_slot.get<int32_t>(), qs, stream);
  prof.mark("moe route", stream);
  A* acc = moe_acc.get<A>();
  float* y = moe_y.get<float>();
  const float* sgu = L.sgu.get<float>();
  const float* sdown = L.sdown.get<float>();
  for (int e = 0; e < E; ++e) {
    if (!count[e]) continue;
    const size_t o = size_t(off[e]);
    gemm->run_rows8(L.wgu.get<char>() + size_t(e) * 2 * FE * H, 2 * FE, H, q + o * H, count[e], acc + o * 2 * FE, f8,
                    stream);
    dequant(acc + o * 2 * FE, count[e], 2 * FE, qs + o, sgu + size_t(e) * 2 * FE, y + o * 2 * FE, false, stream);
  }
  prof.mark("gemm experts gate|up", stream);
  moe_bias(y, rows, 2 * FE, offs_d, E, L.bgu.bytes() ? L.bgu.get<float>() : nullptr, stream);
  expert_act(y, rows, FE, nullptr, moe_hf.get<float>(), desc->moe->gpt_oss, c.swiglu_alpha, c.swiglu_limit, stream);
  quant_rows(moe_hf.get<float>(), rows, FE, q, qs, stream);
  prof.mark("swiglu", stream);
  for (int e = 0; e < E; ++e) {
    if (!count[e]) continue;
    const size_t o = size_t(off[e]);
    gemm->run_rows8(L.wdown.get<char>() + size_t(e) * H * FE, H, FE, q + o * FE, count[e], acc + o * H, f8, stream);
    dequant(acc + o * H, count[e], H, qs + o, sdown + size_t(e) * H, y + o * H, false, stream);
  }
  prof.mark("gemm experts down", stream);
  moe_bias(y, rows, H, offs_d, E, L.bdown.bytes() ? L.bdown.get<float>() : nullptr, stream);
  moe_combine(y, N, K, H, moe_sel.get<int32_t>(), moe_w.get<float>(), moe_slot.get<int32_t>(), x.get<float>(), true,
              stream);
  prof.mark("moe combine", stream);
}

template void GpuModel::Impl::moe_ffn_q8<int8_t, int32_t>(const Layer&, int, const int8_t*, const float*);
template void GpuModel::Impl::moe_ffn_q8<e4m3, float>(const Layer&, int, const e4m3*, const float*);

}  // namespace qt::cuda
