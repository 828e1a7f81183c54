// fp8_block's projections on Hopper's FP8 tensor cores (model_impl.h fp8_lt): the GEMM's fp32 input
// rows quantized per token and 128-column group to E4M3 with the CPU's formula (quantize_fp8_groups),
// then one block-scaled cuBLASLt GEMM per weight segment (GemmLt::run_block_f8) on the weights'
// stored codes and 128×128 block scales, fp32 out: Σ_blocks s_w · s_x · Σ code_w · code_x, the
// CPU's Σ (e4m3·s_w)(e4m3·s_x) up to the order of fp32 additions. Where cuBLASLt refuses a shape
// (or a row count not a multiple of 4), the rows are rounded to bf16 and the decoded weight runs
// the bf16 GEMM, as the other Dequantized rows do.
#include "libquant/cuda/model_impl.h"

namespace qt::cuda {

bool GpuModel::Impl::fp8_block_gemm(const BlockFpWeight& f, const float* rows, int in, int N, float* Y,
                                    bool accumulate) {
  if (!fp8_lt() || f.segments.empty() || N % 4) return false;
  quantize_fp8_groups(rows, fq.get<uint8_t>(), fs.get<float>(), N, in, stream);
  prof.mark("fp8 groups", stream);
  auto all = [&](float* y, bool acc) {
    for (const BlockFpWeight::Segment& g : f.segments)
      if (!gemm->run_block_f8(f.codes.get<uint8_t>() + size_t(g.row0) * in, g.rows, in, g.scales.get<float>(), fq.get(),
                              N, fs.get<float>(), y + g.row0, f.rows, acc, stream))
        return false;
    return true;
  };
  // A failed segment leaves the ones before it written: harmless where the fallback overwrites Y,
  // so an accumulating projection of several segments goes through fy.
  if ((!accumulate || f.segments.size() == 1) && all(Y, accumulate)) return true;
  if (!accumulate || !all(fy.get<float>(), false)) return false;
  add_into(Y, fy.get<float>(), size_t(N) * f.rows, stream);
  return true;
}

void GpuModel::Impl::blockfp_proj(const BlockFpWeight& f, const float* rows, bf16* rb, int out, int in, int N, float* Y,
                                  bool accumulate) {
  if (fp8_block_gemm(f, rows, in, N, Y, accumulate)) return;
  round_activations(act_round, rows, rb, N, in, stream, row_divisor());
  prof.mark("act convert", stream);
  blockfp_dequant(f, wdec.get<bf16>(), stream);
  prof.mark("fp4/fp8 decode", stream);
  gemm->run(wdec.get<bf16>(), out, in, rb, N, Y, CUDA_R_32F, accumulate, stream);
}

void GpuModel::Impl::blockfp_out(const BlockFpWeight& f, const float* rows, bf16* rb, int out, int in, int N,
                                 const DeviceBuffer& post_w) {
  if (!post_w.bytes()) {  // the residual add in the GEMM (beta = 1)
    blockfp_proj(f, rows, rb, out, in, N, x.get<float>(), true);
    return;
  }
  blockfp_proj(f, rows, rb, out, in, N, post.get<float>(), false);
  post_norm_add(post.get<float>(), post_w.get<float>(), x.get<float>(), N, out, cfg.rms_eps, stream);
}

}  // namespace qt::cuda
