// What the CUTLASS GEMMs of the per-token 8-bit block share (gemm_q8_fused.cu, gemm_q8_rope.cu):
// the kernel for int8 codes with an epilogue visitor tree of the caller's, the scale broadcasts,
// the workspace and the launch. Included only where built with CUTLASS (QT_HAVE_CUTLASS).
//
// Codes: int8 (int32 sums, exact) or E4M3 (fp32 sums, FP8_DYNAMIC). E4M3 runs CUTLASS's
// FP8FastAccum ping-pong schedule, the partial sums kept in the tensor cores' accumulator as vLLM's
// sm90 FP8 kernels keep them (csrc/quantization/cutlass_w8a8/c3x/scaled_mm_sm90_fp8_dispatch.cuh:
// the same tile, cluster and schedule): what an FP8 model served on Hopper computes.
//
// Orientation: CUTLASS's M = tokens, N = output channels, K = in. A = X [n, in] row-major, B = W
// [out, in] (column-major K × N: K contiguous, the "TN" the int8 tensor cores read), D [n, out]
// row-major. The tree sees each thread's accumulator fragment: sw by column (Sm90RowBroadcast), sx
// by row (Sm90ColBroadcast), the int32 sums (Sm90AccFetch, converted to fp32 with round-to-nearest
// as float(acc) is) and a compute node of the caller's — the construction of vLLM's
// cutlass_scaled_mm epilogues (csrc/quantization/cutlass_w8a8/c3x/scaled_mm_epilogues_c3x.hpp).
//
// Kernel: 128×128×128 tiles, clusters of 2 along M (each weight tile multicast to both CTAs),
// ping-pong warp groups (each a whole tile; one's epilogue overlaps the other's main loop), tiles
// visited along N in groups of 8 for L2 reuse: of the shapes, tile orders and swizzles timed at the
// 8B shape's gate|up with 32768 tokens (results/cuda.md), the fastest; a 256×128 cooperative
// kernel (epilogue not overlapped) was 10-15% slower.
#pragma once
#include <map>
#include <stdexcept>
#include <string>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/float8.h"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "libquant/cuda/buffer.h"
#include "libquant/cuda/check.h"
#include "libquant/cuda/q8_math.cuh"

namespace qt::cuda::q8cutlass {

using namespace cute;
namespace fu = cutlass::epilogue::fusion;

using Tile = Shape<_128, _128, _128>;
using Cluster = Shape<_2, _1, _1>;
using RowScale = fu::Sm90RowBroadcast<0, Tile, float, float, Stride<_0, _1, _0>>;  // sw[c]
using ColScale = fu::Sm90ColBroadcast<0, Tile, float, float, Stride<_1, _0, _0>>;  // sx[t]
using RowMajor = cutlass::layout::RowMajor;

// Per code type: the sums' type and the main loop's schedule.
template <class Code>
struct Codes;
template <>
struct Codes<int8_t> {
  using Acc = int32_t;
  using Schedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
};
template <>
struct Codes<cutlass::float_e4m3_t> {
  using Acc = float;
  using Schedule = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum;
};

// The GEMM of Code operands with epilogue tree Tree writing D (ElementD, row-major) in subtiles of EpiTile.
template <class Tree, class ElementD, class EpiTile, class Code = int8_t>
struct Q8Gemm {
  using Element = Code;
  using Acc = typename Codes<Code>::Acc;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, EpiTile, Acc, float, void, RowMajor, 8,
      ElementD, RowMajor, 8, cutlass::epilogue::TmaWarpSpecialized, Tree>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Code, RowMajor, 16, Code, cutlass::layout::ColumnMajor, 16,
      Acc, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      typename Codes<Code>::Schedule>::CollectiveOp;
  using Type = cutlass::gemm::device::GemmUniversalAdapter<
      cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>>;
  // The epilogue's thread arguments: the tree's children in order, then the node's.
  using TreeArgs = typename Epilogue::FusionCallbacks::Arguments;
};

// The kernel's workspace (CUTLASS's persistent scheduler asks for a few bytes, or none): one
// buffer per device and thread, grown as needed (each device's model runs on one stream).
inline void* workspace(size_t bytes) {
  if (bytes == 0) return nullptr;
  thread_local std::map<int, DeviceBuffer> ws;
  int dev = 0;
  QT_CUDA_CHECK(cudaGetDevice(&dev));
  ws[dev].reserve(bytes);
  return ws[dev].get();
}

// D [n, out] = the tree of G (a Q8Gemm) over X [n, in] · W [out, in]ᵀ (codes of G's Element).
// what: the caller, for the messages.
template <class G, class ElementD>
void run(const char* what, const void* W_, int out, int in, const void* X_, int n, ElementD* D,
         const typename G::TreeArgs& tree, cudaStream_t s) {
  using Gemm = typename G::Type;
  using GK = typename Gemm::GemmKernel;
  if (n <= 0) return;
  const auto* W = static_cast<const typename G::Element*>(W_);
  const auto* X = static_cast<const typename G::Element*>(X_);
  const auto sa = cutlass::make_cute_packed_stride(typename GK::StrideA{}, make_shape(n, in, 1));
  const auto sb = cutlass::make_cute_packed_stride(typename GK::StrideB{}, make_shape(out, in, 1));
  const auto sd = cutlass::make_cute_packed_stride(typename GK::StrideD{}, make_shape(n, out, 1));
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm, {n, out, in, 1}, {X, sa, W, sb}, {{}, nullptr, {}, D, sd}};
  args.epilogue.thread = tree;
  args.scheduler.raster_order = cutlass::gemm::kernel::detail::RasterOrderOptions::AlongN;
  args.scheduler.max_swizzle_size = 8;
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess)
    throw std::logic_error(std::string(what) + ": CUTLASS cannot run out " + std::to_string(out) + ", in " +
                           std::to_string(in));
  cutlass::Status st = gemm.initialize(args, workspace(Gemm::get_workspace_size(args)), s);
  if (st == cutlass::Status::kSuccess) st = gemm.run(s);
  if (st != cutlass::Status::kSuccess)
    throw std::runtime_error(std::string(what) + ": CUTLASS: " + cutlassGetStatusString(st));
  QT_CUDA_LAUNCHED();
}

}  // namespace qt::cuda::q8cutlass
