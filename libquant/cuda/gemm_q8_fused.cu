// gemm_q8_fused.h: the kernel (with CUTLASS), availability, the shapes, the gate|up interleave.
//
// Orientation: CUTLASS's M = tokens, N = 2F output channels, K = in. A = X [n, in] row-major, B = W
// [2F, in] (column-major K × N: K contiguous, the "TN" the int8 tensor cores read), D [n, 2F]
// 16-bit row-major = h [n, F] fp32. The epilogue is a visitor tree over each thread's accumulator
// fragment: sw by column (Sm90RowBroadcast), sx by row (Sm90ColBroadcast), the int32 sums
// (Sm90AccFetch, converted to fp32 with round-to-nearest as float(acc) is) and one compute node of
// ours (SwigluPack) — the construction of vLLM's cutlass_scaled_mm epilogues
// (csrc/quantization/cutlass_w8a8/c3x/scaled_mm_epilogues_c3x.hpp).
//
// Kernel: 128×128×128 tiles, clusters of 2 along M (each weight tile multicast to both CTAs),
// ping-pong warp groups (each a whole tile; one's epilogue — SwiGLU's exp and division — overlaps
// the other's main loop), tiles visited along N in groups of 8 for L2 reuse: of the shapes, tile
// orders and swizzles timed at the 8B shape's gate|up with 32768 tokens (results/cuda.md), the
// fastest; a 256×128 cooperative kernel (epilogue not overlapped) was 10-15% slower.
#include "libquant/cuda/gemm_q8_fused.h"

#include <map>
#include <stdexcept>
#include <string>

#include "libquant/cuda/buffer.h"
#include "libquant/cuda/check.h"

#ifdef QT_HAVE_CUTLASS
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "libquant/cuda/q8_math.cuh"
#endif

namespace qt::cuda {

bool q8_fused_fits(int F, int in) { return F > 0 && in > 0 && F % 4 == 0 && in % 16 == 0; }

#ifdef QT_HAVE_CUTLASS
namespace {
using namespace cute;

// The compute node: Sm90Compute instantiates it with Array<float, FragmentSize>, the thread's share
// of one epilogue step, inputs in the tree's child order. Accumulator fragments hold columns in
// adjacent pairs (the wgmma C layout: each thread's values come as (c, c + 1) for even c), so with
// gate and up interleaved a pair is (g_j, u_j). h_j's fp32 bits go out as two 16-bit halves at
// columns 2j (low) and 2j + 1 (high): D, 16-bit and 2F wide, is h, fp32 and F wide, in memory.
template <class T>
struct SwigluPack;
template <int N>
struct SwigluPack<cutlass::Array<float, N>> {
  static_assert(N % 2 == 0, "the fragment must hold whole (gate, up) pairs");
  using A = cutlass::Array<float, N>;
  CUTLASS_DEVICE cutlass::Array<uint16_t, N> operator()(A const& sw, A const& sx, A const& acc) const {
    cutlass::Array<uint16_t, N> d;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; i += 2) {
      const float h = silu_mul(deq(sx[i], sw[i], acc[i]), deq(sx[i + 1], sw[i + 1], acc[i + 1]));
      const uint32_t b = __float_as_uint(h);
      d[i] = uint16_t(b & 0xffffu);
      d[i + 1] = uint16_t(b >> 16);
    }
    return d;
  }
};

using Tile = Shape<_128, _128, _128>;
using Cluster = Shape<_2, _1, _1>;
namespace fu = cutlass::epilogue::fusion;
using RowScale = fu::Sm90RowBroadcast<0, Tile, float, float, Stride<_0, _1, _0>>;  // sw[c]
using ColScale = fu::Sm90ColBroadcast<0, Tile, float, float, Stride<_1, _0, _0>>;  // sx[t]
using Tree = fu::Sm90EVT<fu::Sm90Compute<SwigluPack, uint16_t, float, cutlass::FloatRoundStyle::round_to_nearest>,
                         RowScale, ColScale, fu::Sm90AccFetch>;
using RowMajor = cutlass::layout::RowMajor;
using Epilogue =
    cutlass::epilogue::collective::CollectiveBuilder<cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
                                                     cutlass::epilogue::collective::EpilogueTileAuto, int32_t, float,
                                                     void, RowMajor, 8, uint16_t, RowMajor, 8,
                                                     cutlass::epilogue::TmaWarpSpecialized, Tree>::CollectiveOp;
using Mainloop = cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, RowMajor, 16, int8_t, cutlass::layout::ColumnMajor, 16,
    int32_t, Tile, Cluster,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<
    cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>>;

// The kernel's workspace (CUTLASS's persistent scheduler asks for a few bytes, or none): one
// buffer per device and thread, grown as needed (each device's model runs on one stream).
void* workspace(size_t bytes) {
  if (bytes == 0) return nullptr;
  thread_local std::map<int, DeviceBuffer> ws;
  int dev = 0;
  QT_CUDA_CHECK(cudaGetDevice(&dev));
  ws[dev].reserve(bytes);
  return ws[dev].get();
}
}  // namespace

bool q8_fused_available() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;  // sm_90a code runs on compute capability 9.0 only
}

void gemm_q8_swiglu(const int8_t* W, int F, int in, const float* sw, const int8_t* X, int n, const float* sx, float* h,
                    cudaStream_t s) {
  using GK = Gemm::GemmKernel;
  if (n <= 0) return;
  const int out = 2 * F;
  const auto sa = cutlass::make_cute_packed_stride(GK::StrideA{}, make_shape(n, in, 1));
  const auto sb = cutlass::make_cute_packed_stride(GK::StrideB{}, make_shape(out, in, 1));
  const auto sd = cutlass::make_cute_packed_stride(GK::StrideD{}, make_shape(n, out, 1));
  Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                       {n, out, in, 1},
                       {X, sa, W, sb},
                       {{}, nullptr, {}, reinterpret_cast<uint16_t*>(h), sd}};
  args.epilogue.thread = {{sw}, {sx}, {}, {}};  // the tree's children in order, then the node's (none)
  args.scheduler.raster_order = cutlass::gemm::kernel::detail::RasterOrderOptions::AlongN;
  args.scheduler.max_swizzle_size = 8;
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess)
    throw std::logic_error("gemm_q8_swiglu: CUTLASS cannot run F " + std::to_string(F) + ", in " + std::to_string(in) +
                           " (q8_fused_fits checks the shapes)");
  cutlass::Status st = gemm.initialize(args, workspace(Gemm::get_workspace_size(args)), s);
  if (st == cutlass::Status::kSuccess) st = gemm.run(s);
  if (st != cutlass::Status::kSuccess)
    throw std::runtime_error(std::string("gemm_q8_swiglu: CUTLASS: ") + cutlassGetStatusString(st));
  QT_CUDA_LAUNCHED();
}

#else  // built without CUTLASS: q8_fused_available() is false and the callers never get here

bool q8_fused_available() { return false; }
void gemm_q8_swiglu(const int8_t *, int, int, const float *, const int8_t *, int, const float *, float *,
                    cudaStream_t) {
  throw std::logic_error("gemm_q8_swiglu: built without CUTLASS");
}

#endif

void interleave_gate_up(void* rows, int F, size_t row_bytes, cudaStream_t s, bool undo) {
  DeviceBuffer tmp(size_t(2) * F * row_bytes);
  char *r = static_cast<char*>(rows), *t = tmp.get<char>();
  QT_CUDA_CHECK(cudaMemcpyAsync(t, r, tmp.bytes(), cudaMemcpyDeviceToDevice, s));
  // gate row j ↔ row 2j, up row j ↔ row 2j + 1: two strided copies
  const size_t stacked = size_t(F) * row_bytes, interleaved = row_bytes;
  for (int half = 0; half < 2; ++half) {
    char *to = r + half * (undo ? stacked : interleaved), *from = t + half * (undo ? interleaved : stacked);
    QT_CUDA_CHECK(cudaMemcpy2DAsync(to, (undo ? 1 : 2) * row_bytes, from, (undo ? 2 : 1) * row_bytes, row_bytes, F,
                                    cudaMemcpyDeviceToDevice, s));
  }
  QT_CUDA_CHECK(cudaStreamSynchronize(s));  // tmp is freed on return
}

}  // namespace qt::cuda
