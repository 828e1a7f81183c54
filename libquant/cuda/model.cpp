// Loading a Llama-family checkpoint onto the GPU, and the forward of a batch of chunks:
//
//   x = embed(tokens)                                   (fp32 residual stream)
//   per layer:  qkv = rmsnorm(x) · [Wq;Wk;Wv]ᵀ          (one GEMM, fp32 out)
//               q,k,v = rope(q), rope(k), v as f16      (the f16 KV cache of the chunk)
//               x += bf16(attention(q, k, v)) · Woᵀ     (GEMM, residual add in its epilogue)
//               x += bf16(silu(g)·u) · Wdownᵀ,  g|u = rmsnorm(x) · [Wgate;Wup]ᵀ
//   logits = rmsnorm(x) · lm_headᵀ over the scored rows only
//
// A sparse layer (qwen3_moe, mixtral, gpt_oss) replaces the gate|up / down pair by the
// mixture-of-experts FFN on the same normed rows (moe_ffn.cpp): its router (bf16) and experts
// (stacked, in the projections' kind) are loaded here. gpt_oss adds biases to o_proj, the router
// and the experts, sink logits to the softmax (attn_softmax.cu) and YaRN to the RoPE table (the
// CPU's ops::RopeTable, uploaded as it is).
//
// MLX affine folders (every projection affine, any bits/group): each projection's codes are
// decoded to bf16 right before its GEMM (affine.cu), the forward is the bf16 one; a quantized
// embedding / output head is dequantized once at load (the CPU's dequantize_weights).
// NVFP4 / MXFP4 folders run the same way (blockfp.cu's decode), nvfp4_a4 / mxfp4_a4 rounding each
// GEMM's input rows first as the CPU's DequantizedLinear does; FP8_BLOCK runs block-scaled GEMMs on
// the FP8 tensor cores (model_blockfp.cpp), with the decode as their fallback.
// W8A8 folders (int8 / int8_ct per output channel, every projection): the GEMMs run on the int8
// tensor cores into exact int32 sums; the activations are quantized per token where the CPU
// quantizes them (fused into the RMSNorm, into SwiGLU, alone for the attention output) and the
// epilogue y = s_x · (s_w · acc) feeds RoPE or the residual add (int8_ops.h).
// FP8 folders (compressed-tensors FP8_DYNAMIC, E4M3 per output channel): the same block with E4M3
// codes, activations rounded to E4M3 per token, and the FP8 tensor cores' fp32 sums.
//
// The same block as LlamaModel::forward_layer (libquant/model/llama.cpp), driven by the same arch
// row (formats/arch.h): pre- and/or post-norms (a post-norm takes the sublayer's output out of the
// GEMM's residual epilogue: x += post(W·a)), q/k/v biases and q/k norms between the q|k|v GEMM and
// RoPE, RoPE per layer (none, the global table, gemma3's local one), sliding windows and score
// soft-caps in the softmax, SwiGLU or GeGLU, the embedding × √hidden, the final-logit soft-cap.
// For llama and mistral these are the kernels and the order of the plain block above. W8A8 runs
// pre-norm SiLU families (device.cpp refuses the others); a layer with biases, q/k norms or another
// RoPE takes its q|k|v epilogue out of RoPE (dequant, then the fp32 steps).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>

#include "formats/error.h"
#include "libquant/cuda/device_guard.h"
#include "libquant/cuda/int8_ops.h"
#include "libquant/cuda/gemm_q8_fused.h"
#include "libquant/cuda/model_impl.h"
#include "libquant/kernels/bf16.h"
#include "libquant/math/ops.h"
#include "libquant/model/block_tensors.h"
#include "libquant/schemes/packed_values.h"
#include "libquant/schemes/packed_io.h"

namespace qt::cuda {

void check_token_ids(const int32_t* ids, int64_t n, int vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab) user_error("token id {} is outside the vocabulary (0..{})", ids[i], vocab - 1);
}

namespace {

// Host bf16 copy of a float tensor (the CPU's bf16 rounding rule, kernels/bf16.h), or the
// tensor's own bytes when it is bf16 already.
void upload_bf16(const Tensor& t, void* dst, cudaStream_t s) {
  if (t.deferred()) return upload_bf16(materialize(t), dst, s);  // mlx_lm's stacked experts, split lazily
  if (t.dtype == DType::BF16) {
    QT_CUDA_CHECK(cudaMemcpyAsync(dst, t.data, t.nbytes, cudaMemcpyHostToDevice, s));
    QT_CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  const size_t n = size_t(t.numel());
  std::vector<uint16_t> h(n);
  constexpr size_t kBlock = size_t(1) << 20;
  std::vector<float> tmp;
#pragma omp parallel for schedule(static) private(tmp)
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
    tmp.resize(m);
    to_f32_range(t, b, m, tmp.data());
    for (size_t i = 0; i < m; ++i) h[b + i] = kernels::round_bf16(tmp[i]);
  }
  QT_CUDA_CHECK(cudaMemcpyAsync(dst, h.data(), n * 2, cudaMemcpyHostToDevice, s));
  QT_CUDA_CHECK(cudaStreamSynchronize(s));
}

// Symmetric int4 with zero point 8 per output channel (schemes/int4.cpp: byte i of a row is
// u[2i] << 4 | u[2i+1]) as int8 codes u − 8 ∈ [−8, 7]: w = (u − 8)·s exactly as the int8 path's
// w = q·s, so W4A8 runs on the W8A8 kernels (int8 tensor cores, per-token int8 activations).
std::vector<int8_t> unpack_int4(const uint8_t* src, int64_t rows, int64_t cols) {
  std::vector<int8_t> out(size_t(rows * cols));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols / 2; ++i) {
      const uint8_t b = src[r * (cols / 2) + i];
      out[size_t(r * cols + 2 * i)] = int8_t(int(b >> 4) - 8);
      out[size_t(r * cols + 2 * i + 1)] = int8_t(int(b & 15) - 8);
    }
  return out;
}

DeviceBuffer upload_f32(const std::vector<float>& v) {
  DeviceBuffer b(v.size() * sizeof(float));
  QT_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), b.bytes(), cudaMemcpyHostToDevice));
  return b;
}

}  // namespace

GpuModel::Impl::Impl(Checkpoint& ck, bool fused_attention, int dev, int first, int last)
    : cfg(ck.config), desc(&ck.config.desc()), device(dev), first_layer(first), last_layer(last) {
  const DeviceGuard on(device);
  if (has_embed()) check_supported(ck);
  const ModelConfig& c = cfg;
  const int64_t H = c.hidden, F = c.intermediate;
  if (desc->embed_scale) embed_mult = float(std::sqrt(double(H)));
  Q = c.n_heads * c.head_dim;
  KV = c.n_kv_heads * c.head_dim;
  QT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  gemm = std::make_unique<GemmLt>();
  attn = std::make_unique<Attention>(fused_attention);

  auto weight = [&](const std::string& name, int64_t out, int64_t in) -> const Tensor& {
    const Tensor& w = ck.get(name);
    if (w.shape != std::vector<int64_t>{out, in}) user_error("{}: tensor {} has an unexpected shape", ck.path, name);
    return w;
  };
  auto done = [&](const std::string& name) {
    release_pages(ck.get(name));
    ck.tensors.erase(name);
  };
  // Rows of several weights stacked into one matrix: bf16, or (W8A8) int8 codes with their
  // per-channel scales in `scales`.
  auto is_q8 = [&](const std::string& name) {
    std::optional<PackedTensor> p = packed_weight(ck, name);
    return p.has_value();
  };
  // The kernel family of a packed weight's scheme row (check_supported refused the others).
  auto family = [](const PackedTensor& p) { return find_scheme(p.params.scheme).kernel; };
  const std::string q0 = fmt::format("model.layers.{}.self_attn.q_proj.weight", first);
  if (is_q8(q0)) {
    const KernelFamily k = family(*packed_weight(ck, q0));
    affine = k == KernelFamily::Affine;
    bnb4 = k == KernelFamily::CodeBook4;
    blockfp = k == KernelFamily::Dequantized;
    fp8 = k == KernelFamily::Fp8PerToken;
    q8 = k == KernelFamily::Int8PerToken || fp8;
  }
  auto stacked = [&](const std::vector<std::pair<std::string, int64_t>>& parts, int64_t in, DeviceBuffer* scales,
                     AffineWeight* aw, Bnb4Weight* nw, BlockFpWeight* fw) {
    int64_t rows = 0;
    for (auto& [n, r] : parts) rows += r;
    if (blockfp) {
      std::vector<PackedTensor> ps;
      for (auto& [n, r] : parts) {
        std::optional<PackedTensor> p = packed_weight(ck, n);
        if (!p || family(*p) != KernelFamily::Dequantized || (!affine_desc.empty() && p->params.scheme != affine_desc))
          user_error("{}: {} is not {} while the first projection is: mixed layouts: not on cuda yet", ck.path, n,
                     affine_desc.empty() ? "nvfp4/mxfp4/fp8_block" : affine_desc);
        if (p->rows != r || p->cols != in) user_error("{}: tensor {} has an unexpected shape", ck.path, n);
        const ActRound a = act_round_of(find_scheme(p->params.scheme));
        if (act_round_group(a) && in % act_round_group(a))
          user_error("{}: {}: activation groups of {} do not divide the input width {}", ck.path, n, act_round_group(a),
                     in);
        if (affine_desc.empty()) affine_desc = p->params.scheme, act_round = a;
        ps.push_back(std::move(*p));
      }
      std::vector<const PackedTensor*> pp;
      for (const PackedTensor& p : ps) pp.push_back(&p);
      *fw = upload_blockfp(pp, ck.path);
      weight_bytes += fw->bytes();
      for (auto& [n, r] : parts) done(stored_codes_name(ck, n));  // the scales go with ck at the end
      return DeviceBuffer();
    }
    if (bnb4) {  // the parts' flattened code streams and absmax back to back (whole blocks each)
      std::vector<uint8_t> codes;
      std::vector<float> am;
      std::string sch;
      for (auto& [n, r] : parts) {
        std::optional<PackedTensor> p = packed_weight(ck, n);
        if (!p || family(*p) != KernelFamily::CodeBook4 || (!sch.empty() && p->params.scheme != sch))
          user_error("{}: {} is not {} while the first projection is: mixed layouts: not on cuda yet", ck.path, n,
                     sch.empty() ? "nf4/fp4" : sch);
        sch = p->params.scheme;
        const int64_t bs = p->params.group_size;
        if (nw->block == 0) {
          nw->block = int(bs);
          affine_desc = fmt::format("{}-b{}", sch, bs);
        } else if (nw->block != bs) {
          user_error("{}: {}: block sizes differ within q|k|v or gate|up: not on cuda yet", ck.path, n);
        }
        if (p->rows != r || p->cols != in) user_error("{}: tensor {} has an unexpected shape", ck.path, n);
        if ((r * in) % bs || bs % 2)
          user_error("{}: {}: {} values are not whole blocks of {}: not on cuda yet", ck.path, n, r * in, bs);
        const size_t nb = size_t(r * in / 2);
        codes.insert(codes.end(), p->data.data, p->data.data + nb);
        const std::vector<float> a = to_f32(p->scales);
        am.insert(am.end(), a.begin(), a.end());
        release_pages(p->data);
        done(n);
      }
      nw->rows = rows, nw->cols = in;
      nw->codes.resize(codes.size());
      QT_CUDA_CHECK(cudaMemcpy(nw->codes.get(), codes.data(), codes.size(), cudaMemcpyHostToDevice));
      nw->absmax = upload_f32(am);
      const float* table = find_scheme(sch).grid.table;
      nw->table = upload_f32(std::vector<float>(table, table + 16));
      weight_bytes += nw->codes.bytes() + nw->absmax.bytes();
      return DeviceBuffer();
    }
    if (affine) {
      std::vector<uint8_t> codes;
      std::vector<float> sc, bi;
      for (auto& [n, r] : parts) {
        std::optional<PackedTensor> p = packed_weight(ck, n);
        if (!p || family(*p) != KernelFamily::Affine)
          user_error("{}: {} is not affine while the first projection is: mixed layouts: not on cuda yet", ck.path, n);
        const SchemeParams& P = p->params;
        if (aw->bits == 0) {
          aw->bits = P.bits, aw->group = P.group_size;
          aw->round_mode = P.dtype == DType::BF16 ? 1 : P.dtype == DType::F16 ? 2 : 0;
          affine_desc = fmt::format("affine{}-g{}", P.bits, P.group_size);
        } else if (aw->bits != P.bits || aw->group != P.group_size) {
          user_error("{}: {}: bits/group differ within q|k|v or gate|up: not on cuda yet", ck.path, n);
        }
        if (p->rows != r || p->cols != in || P.group_size <= 0 || in % P.group_size)
          user_error("{}: tensor {} has an unexpected shape", ck.path, n);
        const size_t nb = size_t(r) * size_t(in) * size_t(P.bits) / 8;
        codes.insert(codes.end(), p->data.data, p->data.data + nb);
        const std::vector<float> s = to_f32(p->scales), b = to_f32(p->biases);
        sc.insert(sc.end(), s.begin(), s.end());
        bi.insert(bi.end(), b.begin(), b.end());
        release_pages(p->data);
        done(n);
      }
      aw->rows = int(rows), aw->cols = int(in);
      aw->codes.resize(codes.size());
      QT_CUDA_CHECK(cudaMemcpy(aw->codes.get(), codes.data(), codes.size(), cudaMemcpyHostToDevice));
      aw->scales = upload_f32(sc);
      aw->biases = upload_f32(bi);
      weight_bytes += aw->codes.bytes() + aw->scales.bytes() + aw->biases.bytes();
      return DeviceBuffer();
    }
    // cuBLASLt's FP8 GEMMs want both dimensions of the weight in multiples of 16 (torch's
    // _scaled_mm asks the same of its weight operand; the token count is free).
    if (fp8 && (rows % 16 || in % 16))
      user_error("{}: {}: a {} x {} FP8 matrix, not multiples of 16: not on cuda yet", ck.path, parts[0].first, rows,
                 in);
    DeviceBuffer b(size_t(rows * in) * (q8 ? 1 : 2));
    std::vector<float> sc;
    size_t off = 0;
    for (auto& [n, r] : parts) {
      std::optional<PackedTensor> p = packed_weight(ck, n);
      if (p.has_value() != q8)
        user_error("{}: {} is {} while the first projection is not: mixed dense and W8A8 projections: not on cuda yet",
                   ck.path, n, q8 ? "dense" : "quantized");
      if (q8) {
        // int4 codes (two a byte) are unpacked to int8; int8 and int8_ct codes are int8 already.
        const bool i4 = p->data.dtype == DType::U8;
        const KernelFamily want = fp8 ? KernelFamily::Fp8PerToken : KernelFamily::Int8PerToken;
        if (family(*p) != want || p->params.group_size != 0)
          user_error("{}: {} is {} while the first projection is {}: mixed layouts: not on cuda yet", ck.path, n,
                     p->params.scheme, fp8 ? "FP8" : "W8A8/W4A8");
        if (p->rows != r || p->cols != in || (i4 && in % 2))
          user_error("{}: tensor {} has an unexpected shape", ck.path, n);
        if (i4) {  // W4A8: the int4 codes unpacked to int8 once, here; then the W8A8 kernels
          w4 = true;
          const std::vector<int8_t> u = unpack_int4(reinterpret_cast<const uint8_t*>(p->data.data), r, in);
          QT_CUDA_CHECK(cudaMemcpy(b.get<char>() + off, u.data(), u.size(), cudaMemcpyHostToDevice));
        } else {
          QT_CUDA_CHECK(cudaMemcpy(b.get<char>() + off, p->data.data, size_t(r * in), cudaMemcpyHostToDevice));
        }
        const std::vector<float> s = to_f32(p->scales);
        sc.insert(sc.end(), s.begin(), s.end());
        release_pages(p->data);
        off += size_t(r * in);
      } else {
        upload_bf16(weight(n, r, in), b.get<char>() + off, stream);
        off += size_t(r * in) * 2;
      }
      done(n);
    }
    weight_bytes += b.bytes();
    if (q8) {
      *scales = upload_f32(sc);
      weight_bytes += scales->bytes();
    }
    return b;
  };
  // A norm's fp32 weights (read_norm: Gemma's 1 + w folded in) on the device.
  auto upload_norm = [&](std::vector<float> w) {
    if (w.empty()) return DeviceBuffer();
    DeviceBuffer b = upload_f32(w);
    weight_bytes += b.bytes();
    return b;
  };

  // A quantized embedding / output head (MLX folders quantize both): dequantized here, once.
  auto dequantized = [&](const std::string& name) -> std::optional<std::vector<float>> {
    std::optional<PackedTensor> p = packed_weight(ck, name);
    if (!p) return std::nullopt;
    if (p->rows != c.vocab || p->cols != H) user_error("{}: tensor {} has an unexpected shape", ck.path, name);
    return dequantize_weights(*p, name);
  };
  const bool tied = head_is_embedding(ck);
  if (has_head()) {  // an int8 / int4 per-channel head: int8 codes and scales (the CPU runs it with int8 activations)
    std::optional<PackedTensor> p = packed_weight(ck, tied ? "model.embed_tokens.weight" : "lm_head.weight");
    if (p && family(*p) == KernelFamily::Int8PerToken && p->params.group_size == 0 && p->rows == c.vocab &&
        p->cols == H && H % 2 == 0) {
      head_q8 = true;
      head_codes.resize(size_t(c.vocab * H));
      if (p->data.dtype == DType::U8) {  // int4: two codes a byte
        const std::vector<int8_t> u = unpack_int4(reinterpret_cast<const uint8_t*>(p->data.data), c.vocab, H);
        QT_CUDA_CHECK(cudaMemcpy(head_codes.get(), u.data(), u.size(), cudaMemcpyHostToDevice));
      } else {
        QT_CUDA_CHECK(cudaMemcpy(head_codes.get(), p->data.data, size_t(c.vocab * H), cudaMemcpyHostToDevice));
      }
      head_scales = upload_f32(to_f32(p->scales));
      weight_bytes += head_codes.bytes() + head_scales.bytes();
    }
  }
  std::optional<std::vector<float>> emb_q;
  if (has_embed() || (has_head() && tied && !head_q8)) emb_q = dequantized("model.embed_tokens.weight");
  if (!has_embed()) {
  } else if (emb_q) {  // exact fp32 rows for the lookup, as the CPU's dequantize_row gives them
    embed_dtype = 0;
    embed = upload_f32(*emb_q);
  } else {
    const Tensor& emb = weight("model.embed_tokens.weight", c.vocab, H);
    embed_dtype = emb.dtype == DType::F32 ? 0 : emb.dtype == DType::BF16 ? 1 : emb.dtype == DType::F16 ? 2 : -1;
    if (embed_dtype < 0) user_error("{}: embedding of dtype {}: not on cuda yet", ck.path, dtype_name(emb.dtype));
    embed.resize(emb.nbytes);
    QT_CUDA_CHECK(cudaMemcpy(embed.get(), emb.data, emb.nbytes, cudaMemcpyHostToDevice));
  }
  weight_bytes += embed.bytes();
  std::optional<std::vector<float>> head_q = head_q8 || !has_head() ? std::nullopt
                                             : tied                 ? std::move(emb_q)
                                                                    : dequantized("lm_head.weight");
  if (head_q8 || !has_head()) {
  } else if (head_q) {
    lm_head.resize(size_t(c.vocab * H) * 2);
    upload_bf16(Tensor::from_f32(std::move(*head_q), {c.vocab, H}), lm_head.get(), stream);
    weight_bytes += lm_head.bytes();
  } else if (!(tied && embed_dtype == 1 && has_embed())) {
    const Tensor& head_t = weight(tied ? "model.embed_tokens.weight" : "lm_head.weight", c.vocab, H);
    lm_head.resize(size_t(c.vocab * H) * 2);
    upload_bf16(head_t, lm_head.get(), stream);
    weight_bytes += lm_head.bytes();
  }
  if (has_head()) {  // the earlier stages leave the tables to it
    if (!tied) done("lm_head.weight");
    done("model.embed_tokens.weight");
    final_norm = upload_norm(read_norm(ck, "model.norm.weight", H));
    done("model.norm.weight");
  }

  layers.resize(size_t(last - first));
  for (int i = first; i < last; ++i) {
    Layer& L = layers[size_t(i - first)];
    BlockTensors t = read_block_tensors(ck, i);
    L.attn_norm = upload_norm(std::move(t.attn_pre));
    L.attn_post = upload_norm(std::move(t.attn_post));
    L.ffn_norm = upload_norm(std::move(t.ffn_pre));
    L.ffn_post = upload_norm(std::move(t.ffn_post));
    L.q_norm = upload_norm(std::move(t.q_norm));
    L.k_norm = upload_norm(std::move(t.k_norm));
    if (!t.q.bias.empty()) {  // q|k|v biases stacked as the projections are
      std::vector<float> b;
      for (const ProjTensor* x : {&t.q, &t.k, &t.v}) {
        const std::vector<float> v = read_vector(ck, x->bias, x->out);
        b.insert(b.end(), v.begin(), v.end());
        done(x->bias);
      }
      L.bqkv = upload_norm(std::move(b));
    }
    L.rope = !c.has_rope(i) ? 0 : c.rope_local_theta > 0 && c.is_sliding(i) ? 2 : 1;
    L.window = c.is_sliding(i) ? c.sliding_window : 0;
    L.wqkv = stacked({{t.q.weight, t.q.out}, {t.k.weight, t.k.out}, {t.v.weight, t.v.out}}, H, &L.sqkv, &L.aqkv,
                     &L.nqkv, &L.fqkv);
    L.wo = stacked({{t.o.weight, t.o.out}}, t.o.in, &L.so, &L.ao, &L.no, &L.fo);
    if (!t.o.bias.empty()) {
      L.bo = upload_norm(read_vector(ck, t.o.bias, t.o.out));
      done(t.o.bias);
    }
    if (desc->attn_sinks) {
      L.sinks = upload_norm(read_vector(ck, t.prefix + "self_attn.sinks", c.n_heads));
      done(t.prefix + "self_attn.sinks");
    }
    if (c.is_moe_layer(i)) {  // the router (bf16) and the experts, stacked in the projections' kind
      const MoeNames& m = *desc->moe;
      const int64_t FE = c.moe_intermediate, E = c.n_experts;
      std::vector<std::pair<std::string, int64_t>> gu, dn;
      std::vector<float> bgu, bdn;
      // gpt_oss: the router and every expert projection carry a bias (the CPU's loader)
      auto bias = [&](const std::string& name, int64_t n, std::vector<float>& to) {
        if (!m.gpt_oss) return;
        const std::vector<float> v = read_vector(ck, t.prefix + name + ".bias", n);
        to.insert(to.end(), v.begin(), v.end());
        done(t.prefix + name + ".bias");
      };
      for (int e = 0; e < E; ++e) {
        const std::string x = m.experts + std::string(".") + std::to_string(e) + ".";
        gu.push_back({t.prefix + x + m.gate + ".weight", FE});
        gu.push_back({t.prefix + x + m.up + ".weight", FE});
        dn.push_back({t.prefix + x + m.down + ".weight", H});
        bias(x + m.gate, FE, bgu);
        bias(x + m.up, FE, bgu);
        bias(x + m.down, H, bdn);
      }
      const std::string rn = t.prefix + m.router + ".weight";
      std::optional<std::vector<float>> rq;  // a quantized router (MLX folders): decoded once
      if (std::optional<PackedTensor> p = packed_weight(ck, rn)) {
        if (p->rows != E || p->cols != H) user_error("{}: tensor {} has an unexpected shape", ck.path, rn);
        rq = dequantize_weights(*p, rn);
      }
      L.router.resize(size_t(E * H) * 2);
      upload_bf16(rq ? Tensor::from_f32(std::move(*rq), {E, H}) : weight(rn, E, H), L.router.get(), stream);
      weight_bytes += L.router.bytes();
      done(rn);
      std::vector<float> br;
      bias(m.router, E, br);
      L.brouter = upload_norm(std::move(br));
      L.bgu = upload_norm(std::move(bgu));
      L.bdown = upload_norm(std::move(bdn));
      L.wgu = stacked(gu, H, &L.sgu, &L.agu, &L.ngu, nullptr);  // block-FP experts: check_supported refuses
      L.wdown = stacked(dn, FE, &L.sdown, &L.adown, &L.ndown, nullptr);
      continue;
    }
    dense_ffn = true;
    L.wgu = stacked({{t.gate.weight, t.gate.out}, {t.up.weight, t.up.out}}, H, &L.sgu, &L.agu, &L.ngu, &L.fgu);
    L.wdown = stacked({{t.down.weight, t.down.out}}, t.down.in, &L.sdown, &L.adown, &L.ndown, &L.fdown);
  }
  if (q8 && dense_ffn && !swiglu_q8_fits(int(F)))
    user_error("{}: intermediate size {}: W8A8 SwiGLU row does not fit shared memory: not on cuda yet", ck.path, F);
  if (q8 && !residual_rmsnorm_q8_fits(int(H))) q8_fuse = false;
  for (const Layer& L : layers)  // the fused residual norm has no place for o_proj's bias
    if (L.bo.bytes()) q8_fuse = false;
  if (q8) use_q8_fused_gemms();
  if (has_head()) ck.tensors.clear();
}

GpuModel::Impl::~Impl() {
  cudaSetDevice(device);  // the members' buffers are freed after this body, on their device
  if (stream) cudaStreamDestroy(stream);
}

size_t GpuModel::Impl::scratch_bytes(int chunks, int T_, int rows) const {
  const size_t N = size_t(chunks) * T_, H = cfg.hidden, F = dense_ffn ? cfg.intermediate : 0;
  size_t b = N * (4 + H * 4 + H * 2 + size_t(Q + 2 * KV) * 4 + size_t(Q + 2 * KV) * 2 + size_t(Q) * 6 + F * 8 + F * 2);
  const bool k2 = kvq && kvq->key_window(), v2 = kvq && kvq->value_window();
  b += Attention::scratch_bytes(chunks, T_, cfg.n_heads, k2, v2, kvq ? kvq->keys().bound() : KvBound{},
                                kvq ? kvq->values().bound() : KvBound{},
                                Attention::runs_fused(fused_attention, cfg.head_dim, k2, v2));
  if (kvq) b += GpuKv::scratch_bytes({}, cfg.head_dim, chunks, T_, cfg.n_heads, cfg.n_kv_heads);
  b += size_t(chunks) * T_ * H * 2;                                            // hs (at most every row)
  if (head_q8) b += size_t(chunks) * T_ * (H + 4);                             // hq, hsx
  if (desc->has_post_norms() || act_round == ActRound::Nvfp4) b += N * H * 4;  // post
  b += size_t(rows) * (size_t(cfg.vocab) * 4 + 4 + 8) + (size_t(chunks) * T_) * 12;
  if (q8) b += N * (std::max({H, size_t(Q), F}) + 8 + std::max({size_t(Q + 2 * KV), 2 * F, H}) * 4);
  const size_t FE = cfg.is_moe() ? size_t(cfg.moe_intermediate) : 0;
  if (affine || bnb4 || blockfp) b += std::max({size_t(Q + 2 * KV), 2 * F, 2 * FE}) * H * 2;
  if (act_round != ActRound::None) b += N * (std::max(H, F) + 1) * 4;  // xr, xg
  if (fp8_lt()) {                                                      // fq, fs, fy
    const size_t K = std::max({H, size_t(Q), F});
    b += N * K + N * (K / 128 + 1) * 4 + N * H * 4;
  }
  return b + moe_scratch_bytes(N);
}

void GpuModel::Impl::reserve(int chunks, int T_, int rows) {
  if (chunks <= max_chunks && T_ == T && rows <= head_rows) return;
  const DeviceGuard on(device);
  const ModelConfig& c = cfg;
  chunks = std::max(chunks, T_ == T ? max_chunks : 0);
  rows = has_head() ? std::max(rows, head_rows) : 0;
  const size_t N = size_t(chunks) * T_, H = c.hidden, F = dense_ffn ? c.intermediate : 0;
  if (T_ != T) {
    auto upload_table = [&](ops::RopeTable rope, DeviceBuffer& cos_b, DeviceBuffer& sin_b, DeviceBuffer* both) {
      rope.ensure(T_);
      const size_t half = size_t(c.head_dim / 2);
      std::vector<float> cs(size_t(T_) * half), sn(size_t(T_) * half);
      for (int p = 0; p < T_; ++p) {
        std::copy(rope.cos(p), rope.cos(p) + half, cs.begin() + p * half);
        std::copy(rope.sin(p), rope.sin(p) + half, sn.begin() + p * half);
      }
      cos_b = upload_f32(cs);
      sin_b = upload_f32(sn);
      if (both) *both = upload_f32(rope_cos_sin(cs.data(), sn.data(), cs.size()));
    };
    upload_table(ops::RopeTable(c), rope_cos, rope_sin, q8_rope ? &rope_cs : nullptr);
    if (c.rope_local_theta > 0) upload_table(ops::RopeTable(c, c.rope_local_theta), rope_cos_l, rope_sin_l, nullptr);
  }
  tok.resize(N * 4);
  x.resize(N * H * 4);
  xb.resize(N * H * 2);
  qkv.resize(N * size_t(Q + 2 * KV) * 4);
  const size_t packed = q8_rope_now() ? 0 : N;  // q8_rope: q, k, v are columns of qkv's bytes instead
  q.resize(packed * size_t(Q) * 2);
  k.resize(packed * size_t(KV) * 2);
  v.resize(packed * size_t(KV) * 2);
  att.resize(N * size_t(Q) * 4);
  attb.resize(N * size_t(Q) * 2);
  gu.resize(N * 2 * F * 4);
  hb.resize(N * F * 2);
  hs.resize(N * H * 2);
  if (desc->has_post_norms() || act_round == ActRound::Nvfp4) post.resize(N * H * 4);
  if (head_q8) hq.resize(N * H), hsx.resize(N * 4);
  target.resize(N * 4);
  nll.resize(N * 8);
  logits.resize(size_t(rows) * size_t(c.vocab) * 4);
  if (act_round != ActRound::None) xr.resize(N * std::max(H, F) * 4), xg.resize(N * 4);
  if (fp8_lt()) {
    const size_t K = std::max({H, size_t(Q), F});
    fq.resize(N * K), fs.resize(N * (K / 128 + 1) * 4), fy.resize(N * H * 4);
  }
  const size_t FE = c.is_moe() ? size_t(c.moe_intermediate) : 0;
  if (affine || bnb4 || blockfp)
    wdec.resize(std::max({size_t(Q + 2 * KV) * H, size_t(Q) * H, 2 * F * H, H * F, 2 * FE * H}) * 2);
  if (q8) {
    xq.resize(N * std::max({H, size_t(Q), F}));
    sxa.resize(N * 4);
    sxb.resize(N * 4);
    acc.resize(N * std::max({size_t(Q + 2 * KV), 2 * F, H}) * 4);
  }
  moe_reserve(N);
  if (kvq) {
    kvq->reserve(chunks, T_, c.n_heads, c.n_kv_heads);
    const __half *qh = q.get<__half>(), *kh = k.get<__half>(), *vh = v.get<__half>();
    attn->bind(chunks, T_, c.n_heads, c.n_kv_heads, c.head_dim, kvq->q_ptr(qh), kvq->k_ptr(kh), kvq->v_ptr(vh),
               att.get<float>(), kvq->key_window() ? kvq->k2_ptr(kh) : nullptr,
               kvq->value_window() ? kvq->v2_ptr(vh) : nullptr, qh, kvq->keys().bound(), kvq->values().bound());
  } else if (q8_rope_now()) {  // q, k, v: columns of the q|k|v GEMM's f16 rows, in qkv's bytes
    const __half* r = qkv.get<__half>();
    attn->bind(chunks, T_, c.n_heads, c.n_kv_heads, c.head_dim, r, r + Q, r + Q + KV, att.get<float>(), nullptr,
               nullptr, nullptr, {}, {}, Q + 2 * KV);
  } else {
    attn->bind(chunks, T_, c.n_heads, c.n_kv_heads, c.head_dim, q.get<__half>(), k.get<__half>(), v.get<__half>(),
               att.get<float>());
  }
  max_chunks = chunks, T = T_, head_rows = rows;
  tune_gemms(int(N));
}

// Before the timed evaluation: each projection's GEMM at the batch's n tokens, cuBLASLt's
// candidates timed on layer 0's weights and pattern-filled activations (GemmLt::tune). The int8
// GEMMs only: their heuristic's first choice left up to 15% on the table at the 8B shape's
// gate|up; bf16's gained about 2.5% of the evaluation there, less than the tuning itself cost at
// start. QT_CUDA_PROFILE=1 prints the choices.
void GpuModel::Impl::tune_gemms(int n) {
  if (!q8 || layers.empty() || n < 1024) return;
  const int H = cfg.hidden, F = cfg.intermediate;
  const Layer& L = layers[0];
  auto one = [&](const char* name, const void* W, int out, int in, const void* X, int rows, void* Y) {
    float first = 0, best = 0;
    const bool f8 = fp8 && W != head_codes.get();
    const int pick = gemm->tune(W, out, in, X, rows, Y, f8 ? CUDA_R_32F : CUDA_R_32I, f8 ? CUDA_R_8F_E4M3 : CUDA_R_8I,
                                stream, 8, &first, &best);
    if (prof.on())
      std::fprintf(stderr, "lt tune %-10s %s n=%d: candidate %d, %.3f ms (heuristic's first %.3f ms)\n", name,
                   f8 ? "fp8" : "int8", rows, pick, best, first);
  };
  // int8 codes in 0..63; as E4M3, 0x00..0x3f are finite values below 2
  fill_random(xq.get<uint32_t>(), xq.bytes() / 4, 27, 0x3f3f3f3fu, stream);
  void* y = acc.get();
  const void* a = xq.get();
  if (!q8_rope_now()) one("qkv", L.wqkv.get(), Q + 2 * KV, H, a, n, y);  // else CUTLASS's (gemm_q8_fused.h)
  one("o", L.wo.get(), H, Q, a, n, y);
  if (!L.router.bytes()) {  // a sparse layer's experts run per-expert row counts (run_rows8)
    if (!q8_cutlass) one("gate|up", L.wgu.get(), 2 * F, H, a, n, y);  // else CUTLASS's (gemm_q8_fused.h)
    one("down", L.wdown.get(), H, F, a, n, y);
  }
  if (head_q8 && head_rows >= 1024) {  // the output head, at the slice eval-ppl runs (head_rows)
    fill_random(hq.get<uint32_t>(), hq.bytes() / 4, 28, 0x3f3f3f3fu, stream);
    one("lm_head", head_codes.get(), cfg.vocab, H, hq.get(), head_rows, logits.get());
  }
  QT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void GpuModel::Impl::forward(const int32_t* ids, int chunks) {
  const DeviceGuard on(device);
  const int N = chunks * T;
  if (chunks > max_chunks) throw std::logic_error("GpuModel: forward of more chunks than reserved");
  check_token_ids(ids, N, cfg.vocab);
  prof.start(stream);
  QT_CUDA_CHECK(cudaMemcpyAsync(tok.get(), ids, size_t(N) * 4, cudaMemcpyHostToDevice, stream));
  embed_tokens(tok.get<int32_t>(), chunks);
  run_layers(chunks);
}

void GpuModel::Impl::embed_tokens(const int32_t* dev_ids, int chunks) {
  cuda::embed(dev_ids, chunks * T, embed.get(), embed_dtype, cfg.hidden, x.get<float>(), stream, embed_mult);
  prof.mark("embed", stream);
}

void GpuModel::Impl::run_layers(int chunks) {
  const ModelConfig& c = cfg;
  const int N = chunks * T, H = c.hidden, F = c.intermediate;
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& L = layers[li];
    if (q8) {  // a sparse layer before adds its FFN's output itself
      const Layer* prev = li && !layers[li - 1].router.bytes() ? &layers[li - 1] : nullptr;
      if (fp8)
        forward_layer_q8<e4m3, float>(L, chunks, prev, li + 1 == layers.size());
      else
        forward_layer_q8<int8_t, int32_t>(L, chunks, prev, li + 1 == layers.size());
      continue;
    }
    const float* rows = pre_norm(L.attn_norm, N);
    if (fp8_lt())
      blockfp_proj(L.fqkv, rows, xb.get<bf16>(), Q + 2 * KV, H, N, qkv.get<float>(), false);
    else
      gemm->run(weight(L.wqkv, L.aqkv, L.nqkv, L.fqkv), Q + 2 * KV, H, xb.get<bf16>(), N, qkv.get(), CUDA_R_32F, false,
                stream);
    if (row_divisor()) divide_rows(qkv.get<float>(), row_divisor(), N, Q + 2 * KV, nullptr, stream);
    prof.mark("gemm qkv", stream);
    qkv_to_heads(L, N);
    attend(chunks, L);
    if (fp8_lt()) {
      blockfp_out(L.fo, att.get<float>(), attb.get<bf16>(), H, Q, N, L.attn_post);
    } else {
      if (act_round != ActRound::None)  // the fp32 attention output rounded straight into bf16
        round_activations(act_round, att.get<float>(), attb.get<bf16>(), N, Q, stream, row_divisor());
      else
        to_bf16(att.get<float>(), size_t(N) * Q, attb.get<bf16>(), stream);
      prof.mark("act convert", stream);
      out_proj(weight(L.wo, L.ao, L.no, L.fo), H, Q, attb.get<bf16>(), N, L.attn_post);
    }
    if (L.bo.bytes()) add_bias(x.get<float>(), L.bo.get<float>(), N, H, stream);  // gpt_oss: no post-norm
    prof.mark("gemm o", stream);
    const float* frows = pre_norm(L.ffn_norm, N);
    if (L.router.bytes()) {
      moe_ffn(L, N);
      continue;
    }
    if (fp8_lt())
      blockfp_proj(L.fgu, frows, xb.get<bf16>(), 2 * F, H, N, gu.get<float>(), false);
    else
      gemm->run(weight(L.wgu, L.agu, L.ngu, L.fgu), 2 * F, H, xb.get<bf16>(), N, gu.get(), CUDA_R_32F, false, stream);
    if (row_divisor()) divide_rows(gu.get<float>(), row_divisor(), N, 2 * F, nullptr, stream);
    prof.mark("gemm gate|up", stream);
    if (fp8_lt()) {
      swiglu(gu.get<float>(), N, F, xr.get<float>(), stream, desc->act == Activation::GeluTanh);
      prof.mark("swiglu", stream);
      blockfp_out(L.fdown, xr.get<float>(), hb.get<bf16>(), H, F, N, L.ffn_post);
      prof.mark("gemm down", stream);
      continue;
    }
    if (act_round != ActRound::None) {  // fp32 rows rounded into hb as the CPU rounds its fp32 rows
      swiglu(gu.get<float>(), N, F, xr.get<float>(), stream, desc->act == Activation::GeluTanh);
      round_activations(act_round, xr.get<float>(), hb.get<bf16>(), N, F, stream, row_divisor());
    } else {
      swiglu(gu.get<float>(), N, F, hb.get<bf16>(), stream, desc->act == Activation::GeluTanh);
    }
    prof.mark("swiglu", stream);
    out_proj(weight(L.wdown, L.adown, L.ndown, L.fdown), H, F, hb.get<bf16>(), N, L.ffn_post);
    prof.mark("gemm down", stream);
  }
}

const float* GpuModel::Impl::pre_norm(const DeviceBuffer& w, int N) {
  if (act_round != ActRound::None) {  // fp32 rows rounded into xb as the CPU rounds its fp32 rows
    const float* rows = x.get<float>();
    if (w.bytes()) {
      rmsnorm(x.get<float>(), w.get<float>(), xr.get<float>(), N, cfg.hidden, cfg.rms_eps, stream);
      rows = xr.get<float>();
    }
    if (!fp8_lt()) round_activations(act_round, rows, xb.get<bf16>(), N, cfg.hidden, stream, row_divisor());
    prof.mark("norm", stream);
    return rows;
  }
  if (w.bytes())
    rmsnorm(x.get<float>(), w.get<float>(), xb.get<bf16>(), N, cfg.hidden, cfg.rms_eps, N, 0, 0, stream);
  else
    to_bf16(x.get<float>(), size_t(N) * cfg.hidden, xb.get<bf16>(), stream);
  prof.mark("norm", stream);
  return nullptr;
}

void GpuModel::Impl::qkv_to_heads(const Layer& L, int N) {
  const ModelConfig& c = cfg;
  float* y = qkv.get<float>();
  if (L.bqkv.bytes()) add_bias(y, L.bqkv.get<float>(), N, Q + 2 * KV, stream);
  if (L.q_norm.bytes()) {
    if (desc->qk_norm == QkNorm::PerHead)
      qk_norm(y, N, Q + 2 * KV, c.n_heads, c.head_dim, L.q_norm.get<float>(), c.n_kv_heads, c.head_dim, Q,
              L.k_norm.get<float>(), c.rms_eps, stream);
    else
      qk_norm(y, N, Q + 2 * KV, 1, Q, L.q_norm.get<float>(), 1, KV, Q, L.k_norm.get<float>(), c.rms_eps, stream);
  }
  if (L.bqkv.bytes() || L.q_norm.bytes()) prof.mark("bias / q,k norm", stream);
  const float* cs = L.rope == 2 ? rope_cos_l.get<float>() : L.rope == 1 ? rope_cos.get<float>() : nullptr;
  const float* sn = L.rope == 2 ? rope_sin_l.get<float>() : L.rope == 1 ? rope_sin.get<float>() : nullptr;
  rope_split(y, N, T, c.n_heads, c.n_kv_heads, c.head_dim, cs, sn, q.get<__half>(), k.get<__half>(), v.get<__half>(),
             stream);
  prof.mark("rope", stream);
}

void GpuModel::Impl::out_proj(const bf16* W, int out, int in, const bf16* A, int N, const DeviceBuffer& post_w) {
  float* d = row_divisor();
  if (!post_w.bytes() && !d) {  // the residual add in the GEMM's epilogue
    gemm->run(W, out, in, A, N, x.get(), CUDA_R_32F, true, stream);
    return;
  }
  gemm->run(W, out, in, A, N, post.get(), CUDA_R_32F, false, stream);
  if (d) divide_rows(post.get<float>(), d, N, out, post_w.bytes() ? nullptr : x.get<float>(), stream);
  if (post_w.bytes())
    post_norm_add(post.get<float>(), post_w.get<float>(), x.get<float>(), N, out, cfg.rms_eps, stream);
}

const bf16* GpuModel::Impl::weight(const DeviceBuffer& dense, const AffineWeight& a, const Bnb4Weight& n,
                                   const BlockFpWeight& f) {
  if (!f.empty()) {
    blockfp_dequant(f, wdec.get<bf16>(), stream);
    prof.mark("fp4/fp8 decode", stream);
    return wdec.get<bf16>();
  }
  if (!n.empty()) {
    bnb4_dequant(n, wdec.get<bf16>(), stream);
    prof.mark("nf4/fp4 decode", stream);
    return wdec.get<bf16>();
  }
  if (a.empty()) return dense.get<bf16>();
  affine_dequant(a, wdec.get<bf16>(), stream);
  prof.mark("affine decode", stream);
  return wdec.get<bf16>();
}

// ------------------------------------------------------------------------------- GpuModel

GpuModel::~GpuModel() = default;
const ModelConfig& GpuModel::config() const { return impl().cfg; }
size_t GpuModel::weight_bytes() const {
  size_t b = 0;
  for (const auto& s : stages_) b += s->weight_bytes;
  return b;
}
std::string GpuModel::kind() const {
  const Impl& I = impl();
  return I.q8 ? (I.fp8 ? "fp8" : I.w4 ? "w4a8" : "w8a8") : I.affine || I.bnb4 || I.blockfp ? I.affine_desc : "bf16";
}

}  // namespace qt::cuda
