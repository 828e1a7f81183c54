// gemm_q8_fused.h: the gate|up kernel (with CUTLASS; cutlass_q8.cuh has the GEMM it shares with
// gemm_q8_rope.cu), availability, the shapes, the gate|up interleave. D here is 16-bit and [n, 2F]
// wide in memory: h [n, F] fp32.
#include "libquant/cuda/gemm_q8_fused.h"

#include <stdexcept>
#include <string>

#include "libquant/cuda/buffer.h"
#include "libquant/cuda/check.h"

#ifdef QT_HAVE_CUTLASS
#include "libquant/cuda/cutlass_q8.cuh"
#endif

namespace qt::cuda {

bool q8_fused_fits(int F, int in) { return F > 0 && in > 0 && F % 4 == 0 && in % 16 == 0; }

#ifdef QT_HAVE_CUTLASS
namespace {
using namespace q8cutlass;

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

using Tree = fu::Sm90EVT<fu::Sm90Compute<SwigluPack, uint16_t, float, cutlass::FloatRoundStyle::round_to_nearest>,
                         RowScale, ColScale, fu::Sm90AccFetch>;
template <class Code>
using Gemm = Q8Gemm<Tree, uint16_t, cutlass::epilogue::collective::EpilogueTileAuto, Code>;

template <class Code>
void run_swiglu(const void* W, int F, int in, const float* sw, const void* X, int n, const float* sx, float* h,
                cudaStream_t s) {
  // the tree's children in order (sw, sx, the sums), then the node's arguments (none)
  run<Gemm<Code>>("gemm_q8_swiglu", W, 2 * F, in, X, n, reinterpret_cast<uint16_t*>(h), {{sw}, {sx}, {}, {}}, s);
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
  run_swiglu<int8_t>(W, F, in, sw, X, n, sx, h, s);
}
void gemm_q8_swiglu(const __nv_fp8_e4m3* W, int F, int in, const float* sw, const __nv_fp8_e4m3* X, int n,
                    const float* sx, float* h, cudaStream_t s) {
  run_swiglu<cutlass::float_e4m3_t>(W, F, in, sw, X, n, sx, h, s);
}

#else  // built without CUTLASS: q8_fused_available() is false and the callers never get here

bool q8_fused_available() { return false; }
void gemm_q8_swiglu(const int8_t *, int, int, const float *, const int8_t *, int, const float *, float *,
                    cudaStream_t) {
  throw std::logic_error("gemm_q8_swiglu: built without CUTLASS");
}
void gemm_q8_swiglu(const __nv_fp8_e4m3 *, int, int, const float *, const __nv_fp8_e4m3 *, int, const float *, float *,
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
