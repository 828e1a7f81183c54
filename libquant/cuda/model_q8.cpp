// The per-token 8-bit block (W8A8 / W4A8 with int8 codes and int32 sums, FP8 with E4M3 codes and
// fp32 sums): one layer of GpuModel::Impl's forward for those folders.
//
//   a, sa = int8(rmsnorm(x))               (per-token codes and scales)
//   q, k, v = rope(sa · (sqkv · (a · Wqkvᵀ)))   (rope_split_q8: the GEMM's epilogue fused into RoPE)
//   a, sa = int8(attention);  x += sa · (so · (a · Woᵀ))
//   a, sa = int8(rmsnorm(x));  h = silu(g)·u of sa · (sgu · (a · Wguᵀ));  a, sb = int8(h)
//   x += sb · (sdown · (a · Wdownᵀ))
//
// The GEMMs run on cuBLASLt into int32 (fp32 for FP8) sums that the next pass reads: the residual
// add fused into the next RMSNorm, SwiGLU into the quantization (int8_ops.h). Except, on an sm_90
// GPU (q8_cutlass; int8 or E4M3 codes), gate|up: a CUTLASS GEMM with SwiGLU in its epilogue
// (gemm_q8_fused.h) writes h, half the bytes of its sums, then quant_rows — the same codes; and
// q|k|v (q8_rope): a CUTLASS GEMM with RoPE in its epilogue writes f16 q, k, v, the values
// rope_split_q8 writes, as columns of one matrix that the fused attention reads in place.
#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "libquant/cuda/gemm_q8_fused.h"
#include "libquant/cuda/int8_ops.h"
#include "libquant/cuda/model_impl.h"

namespace qt::cuda {

// The q|k|v GEMM with RoPE inside (q8_rope_now) into qkv's bytes, or cuBLASLt's into acc and then
// rope_split_q8, or (a layer with biases, q/k norms or another RoPE) its epilogue alone and the
// fp32 block's steps.
template <typename C, typename A>
void GpuModel::Impl::qkv_q8(const Layer& L, int N, const C* a, const float* sa) {
  const ModelConfig& c = cfg;
  const int H = c.hidden;
  if (q8_rope_now()) {
    gemm_q8_rope(L.wqkv.get<C>(), Q + 2 * KV, H, L.sqkv.get<float>(), a, N, sa, T, c.head_dim, Q + KV,
                 rope_cs.get<float>(), qkv.get<__half>(), stream);
    prof.mark("gemm qkv", stream);
    return;
  }
  A* y = acc.get<A>();
  gemm8(L.wqkv, Q + 2 * KV, H, a, N, y);
  prof.mark("gemm qkv", stream);
  if (q8_fuse && q8_plain_qkv(L)) {
    rope_split_q8(y, sa, L.sqkv.get<float>(), N, T, c.n_heads, c.n_kv_heads, c.head_dim, rope_cos.get<float>(),
                  rope_sin.get<float>(), q.get<__half>(), k.get<__half>(), v.get<__half>(), stream);
    prof.mark("rope", stream);
  } else {  // the epilogue alone, then the fp32 block's biases, q/k norms and the layer's RoPE
    dequant(y, N, Q + 2 * KV, sa, L.sqkv.get<float>(), qkv.get<float>(), false, stream);
    prof.mark("dequant", stream);
    qkv_to_heads(L, N);
  }
}

void GpuModel::Impl::use_q8_fused_gemms() {
  const int H = cfg.hidden, F = cfg.intermediate;
  const bool cutlass = q8_fused_available();  // an sm_90 GPU, CUTLASS built in
  q8_rope = cutlass && q8_fuse && Attention::runs_fused(fused_attention, cfg.head_dim, false, false) &&
            q8_rope_fits(Q + 2 * KV, H, cfg.head_dim, Q + KV) &&
            std::all_of(layers.begin(), layers.end(), [&](const Layer& L) { return q8_plain_qkv(L); });
  q8_cutlass = cutlass && q8_fused_fits(F, H);
  if (!q8_cutlass) return;
  for (Layer& L : layers) {
    if (L.router.bytes()) continue;  // a sparse layer's experts keep their own GEMMs (moe_ffn.cpp)
    interleave_gate_up(L.wgu.get(), F, size_t(H), stream);
    interleave_gate_up(L.sgu.get(), F, sizeof(float), stream);
  }
}

template <typename C, typename A>
void GpuModel::Impl::gemm8(const DeviceBuffer& W, int out, int in, const C* X, int n, A* Y) {
  if constexpr (std::is_same_v<C, int8_t>)
    gemm->run_i8(W.get<int8_t>(), out, in, X, n, Y, stream);
  else
    gemm->run_f8(W.get(), out, in, X, n, Y, stream);
}

template <typename C, typename A>
void GpuModel::Impl::forward_layer_q8(const Layer& L, int chunks, const Layer* prev, bool last) {
  const ModelConfig& c = cfg;
  const int N = chunks * T, H = c.hidden, F = c.intermediate;
  C* a = xq.get<C>();
  float *sa = sxa.get<float>(), *sb = sxb.get<float>();
  A* y = acc.get<A>();
  float* xf = x.get<float>();
  if (q8_fuse && prev)  // the previous layer's down output (acc, sb) added here
    residual_rmsnorm_q8(y, sb, prev->sdown.get<float>(), xf, L.attn_norm.get<float>(), N, H, c.rms_eps, a, sa, stream);
  else
    rmsnorm_q8(xf, L.attn_norm.get<float>(), N, H, c.rms_eps, a, sa, stream);
  prof.mark("norm", stream);
  qkv_q8<C, A>(L, N, a, sa);
  attend(chunks, L);
  quant_rows(att.get<float>(), N, Q, a, sa, stream);
  prof.mark("act convert", stream);
  gemm8(L.wo, H, Q, a, N, y);
  prof.mark("gemm o", stream);
  if (q8_fuse) {
    residual_rmsnorm_q8(y, sa, L.so.get<float>(), xf, L.ffn_norm.get<float>(), N, H, c.rms_eps, a, sa, stream);
  } else {
    dequant(y, N, H, sa, L.so.get<float>(), xf, true, stream);
    if (L.bo.bytes()) add_bias(xf, L.bo.get<float>(), N, H, stream);
    prof.mark("dequant", stream);
    rmsnorm_q8(xf, L.ffn_norm.get<float>(), N, H, c.rms_eps, a, sa, stream);
  }
  prof.mark("norm", stream);
  if (L.router.bytes()) {  // the router reads the normed rows in bf16, the experts their codes
    pre_norm(L.ffn_norm, N);
    moe_ffn_q8<C, A>(L, N, a, sa);
    return;
  }
  if (q8_cutlass) {  // h (fp32 [N, F]) in acc's bytes, then its codes
    gemm_q8_swiglu(L.wgu.get<C>(), F, H, L.sgu.get<float>(), a, N, sa, acc.get<float>(), stream);
    prof.mark("gemm gate|up", stream);
    quant_rows(acc.get<float>(), N, F, a, sb, stream);
  } else {
    gemm8(L.wgu, 2 * F, H, a, N, y);
    prof.mark("gemm gate|up", stream);
    swiglu_q8(y, N, F, sa, L.sgu.get<float>(), a, sb, stream);
  }
  prof.mark("swiglu", stream);
  gemm8(L.wdown, H, F, a, N, y);
  prof.mark("gemm down", stream);
  if (!q8_fuse || last) {  // else the next layer's first norm adds it
    dequant(y, N, H, sb, L.sdown.get<float>(), xf, true, stream);
    prof.mark("dequant", stream);
  }
}

template void GpuModel::Impl::qkv_q8<int8_t, int32_t>(const Layer&, int, const int8_t*, const float*);
template void GpuModel::Impl::qkv_q8<e4m3, float>(const Layer&, int, const e4m3*, const float*);
template void GpuModel::Impl::forward_layer_q8<int8_t, int32_t>(const Layer&, int, const Layer*, bool);
template void GpuModel::Impl::forward_layer_q8<e4m3, float>(const Layer&, int, const Layer*, bool);

}  // namespace qt::cuda
