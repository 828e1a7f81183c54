// Which device, and what the GPU forward supports.
#include <fmt/format.h>

#include "formats/error.h"
#include "libquant/cuda/backend.h"
#include "libquant/cuda/check.h"
#include "libquant/cuda/moe.h"
#include "libquant/schemes/packed_io.h"

namespace qt::cuda {

bool built() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string DeviceInfo::describe() const {
  return fmt::format("{} (sm_{}{}, {:.0f} GiB), driver {}.{}, CUDA runtime {}.{}", name, cc_major, cc_minor,
                     double(memory) / double(1 << 30), driver / 1000, driver % 1000 / 10, runtime / 1000,
                     runtime % 1000 / 10);
}

DeviceInfo device_info(int device) {
  if (device_count() == 0) user_error("--device cuda: no CUDA device found (no GPU, or no driver)");
  DeviceInfo d;
  cudaDeviceProp p{};
  QT_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  d.name = p.name;
  d.cc_major = p.major, d.cc_minor = p.minor;
  d.memory = p.totalGlobalMem;
  QT_CUDA_CHECK(cudaDriverGetVersion(&d.driver));
  QT_CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime));
  return d;
}

void check_supported(const Checkpoint& ck) {
  const ModelConfig& c = ck.config;
  auto refuse = [&](const std::string& what) { user_error("{}: {}: not on cuda yet", ck.path, what); };
  const ArchDesc& a = c.desc();  // every row runs (model.cpp); W8A8 below refuses some
  if (c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads || c.head_dim % 2 || c.hidden <= 0 ||
      c.vocab <= 0 || c.n_layers <= 0)
    user_error("{}: inconsistent head configuration", ck.path);
  bool any_q = false, any_dense = false, any_int8 = false, any_blockfp = false;
  const std::map<std::string, std::string> owners = quantized_tensor_owners(ck);
  for (const auto& [stored, t] : ck.tensors) {
    // A described weight is checked once, by its codes' tensor under the weight's name.
    std::string name = stored;
    if (auto o = owners.find(stored); o != owners.end()) {
      if (stored_codes_name(ck, o->second) != stored) continue;  // its scales / biases
      name = o->second;
    }
    // mixtral's router and experts sit under block_sparse_moe.
    const bool moe = c.is_moe() && (name.find(std::string(".") + a.moe->experts + ".") != std::string::npos ||
                                    name.find(std::string(".") + a.moe->router + ".") != std::string::npos);
    const bool proj = moe || name.find(".self_attn.") != std::string::npos || name.find(".mlp.") != std::string::npos;
    if (is_float(t.dtype) && t.dtype != DType::F64) {
      if (proj && name.size() > 12 && name.compare(name.size() - 12, 12, "_proj.weight") == 0) any_dense = true;
      continue;
    }
    if (name.find(".weight.") != std::string::npos) continue;  // bitsandbytes' absmax / quant_state of a weight
    const bool table = name == "model.embed_tokens.weight" || name == "lm_head.weight";
    const std::optional<PackedTensor> p = proj || table ? packed_weight(ck, name) : std::nullopt;
    // A quantized table is dequantized once at load (an activation-rounding head, which the CPU
    // runs on rounded inputs, is not).
    if (p && table && !find_scheme(p->params.scheme).round_activations) continue;
    if (p && table) refuse(fmt::format("{} weights ({}) with rounded activations", p->params.scheme, name));
    // The kernel families cuda runs, on weights in their stored form (a row whose kernels take it
    // in another row's form, kernel_form, is not here yet).
    const Scheme* row = p ? &find_scheme(p->params.scheme) : nullptr;
    // Per channel, per-token activations: W8A8 / W4A8 (int8 codes) and FP8 (E4M3 codes).
    const bool int8_pc = row &&
                         (row->kernel == KernelFamily::Int8PerToken || row->kernel == KernelFamily::Fp8PerToken) &&
                         p->params.group_size == 0;
    if (!row || row->kernel_form ||
        !(int8_pc || row->kernel == KernelFamily::CodeBook4 || row->kernel == KernelFamily::Affine ||
          row->kernel == KernelFamily::Dequantized))
      refuse(fmt::format(
          "{} weights ({}; cuda runs dense f32/bf16/f16, W8A8 int8, W4A8 int4 and FP8 E4M3 per channel, MLX affine, "
          "NF4/FP4, NVFP4, MXFP4, FP8_BLOCK)",
          p ? p->params.scheme + (p->params.group_size ? " group " + std::to_string(p->params.group_size) : "")
            : std::string(dtype_name(t.dtype)),
          name));
    any_q = true;
    any_int8 = any_int8 || (int8_pc && proj);
    any_blockfp = any_blockfp || row->kernel == KernelFamily::Dequantized;
  }
  if (c.is_moe()) {  // the MoE FFN (moe_ffn.cpp): bf16, weight-only decoded per expert, or 8-bit per expert
    if (any_blockfp) refuse("NVFP4 / MXFP4 / FP8_BLOCK weights in a mixture-of-experts model");
    // An expert's slices of the stacked 8-bit matrices (FP8's GEMMs want multiples of 16)
    if (any_int8 && (c.moe_intermediate % 16 || c.hidden % 16))
      refuse(fmt::format("8-bit experts of hidden {} and intermediate {} (cuda's want multiples of 16)", c.hidden,
                         c.moe_intermediate));
    if (c.n_experts > kMoeMaxExperts || c.n_experts_per_tok < 1 || c.n_experts_per_tok > kMoeMaxTopK ||
        c.n_experts_per_tok > c.n_experts)
      refuse(fmt::format("{} experts, {} per token (cuda routes up to {} experts, {} per token)", c.n_experts,
                         c.n_experts_per_tok, kMoeMaxExperts, kMoeMaxTopK));
  }
  if (any_q && any_dense)
    refuse("mixed dense and quantized projections (some left in float: a width the group does not divide)");
  // The W8A8 block quantizes the activations inside the pre-norms and SwiGLU (int8_ops.h).
  if (any_int8 && (a.has_post_norms() || !a.norms.attn_pre || !a.norms.ffn_pre || a.act != Activation::Silu))
    refuse(
        fmt::format("W8A8/W4A8/FP8 weights with {}'s block (post-norms or GeGLU; cuda runs them for the pre-norm SiLU "
                    "families, and {} in bf16 or weight-only)",
                    c.arch, c.arch));
}

}  // namespace qt::cuda
