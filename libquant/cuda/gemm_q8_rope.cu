// gemm_q8_fused.h's q|k|v GEMM with RoPE in its epilogue (with CUTLASS; cutlass_q8.cuh), and the
// order of the q and k rows it takes.
//
// RoPE pairs channel i of a head with i + hd/2. The rows of W are loaded with each head's 8-row
// blocks paired (pair_rope_blocks: block b and b + hd/16 side by side), so a pair's columns are 8
// apart, and the wgmma accumulator layout gives each thread columns c + 8j of its rows: both halves
// of every pair sit in one thread's registers within any epilogue subtile 16 or more columns wide.
// (A 64 × 128 subtile holds (i, i + 64) unpermuted, but ran the GEMM 15% slower than CUTLASS's
// default subtiles, measured at the 8B shape.) The node dequantizes each value in visit() and
// rotates the pairs in reduce(), which CUTLASS calls with the thread's whole subtile before
// converting it to f16 for the TMA store; the fused attention reads q and k back through the
// same block order (attention_fused.h).
#include <stdexcept>

#include "libquant/cuda/gemm_q8_fused.h"

#include "libquant/cuda/buffer.h"
#include "libquant/cuda/check.h"

#ifdef QT_HAVE_CUTLASS
#include "libquant/cuda/cutlass_q8.cuh"
#endif

namespace qt::cuda {

bool q8_rope_fits(int out, int in, int hd, int rot) {
  return in > 0 && in % 16 == 0 && out % 8 == 0 && (hd == 64 || hd == 128) && rot % hd == 0 && rot <= out;
}

#ifdef QT_HAVE_CUTLASS
namespace {
using namespace q8cutlass;

// The tree's root: y = sx · (sw · acc) per value (visit), then RoPE on columns below `rot` (reduce):
// in each head (kHd wide, blocks paired as above) the even block's value and the one 8 columns on,
// at row t's position t % T, angle tables [T, kHd/2].
template <int kHd>
struct RopeDeq {
  struct SharedStorage {};
  struct Arguments {
    const float* cos = nullptr;
    const float* sin = nullptr;
    int T = 1;
    int rot = 0;  // the q and k columns [0, rot)
  };
  using Params = Arguments;
  template <class PS>
  static constexpr Params to_underlying_arguments(PS const&, Arguments const& a, void*) {
    return a;
  }
  template <class PS>
  static bool can_implement(PS const&, Arguments const& a) {
    return a.T > 0 && a.rot % kHd == 0;
  }
  template <class PS>
  static size_t get_workspace_size(PS const&, Arguments const&) {
    return 0;
  }
  template <class PS>
  static cutlass::Status initialize_workspace(PS const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }
  CUTLASS_HOST_DEVICE RopeDeq() {}
  CUTLASS_HOST_DEVICE RopeDeq(Params const& p, SharedStorage const&) : params(p) {}
  Params params;

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(fu::detail::ProducerLoadArgs<Args...> const&) {
    return fu::detail::EmptyProducerLoadCallbacks{};
  }

  // tCcD: each register's coordinates relative to the thread's first (subtile modes last); origin:
  // that first register's absolute (token, channel).
  template <class CTensor>
  struct ConsumerStoreCallbacks : fu::detail::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(CTensor c, int m0, int n0, Params const& p)
        : tCcD(c), m0(m0), n0(n0), params(p) {}
    CTensor tCcD;
    int m0, n0;
    Params const& params;

    // acc: the int32 sums (Sm90AccFetch), converted as float(acc) is (round to nearest)
    template <typename ElementAccumulator, typename ElementAcc, int N>
    CUTLASS_DEVICE cutlass::Array<float, N> visit(cutlass::Array<ElementAccumulator, N> const&, int, int, int,
                                                  cutlass::Array<float, N> const& sw,
                                                  cutlass::Array<float, N> const& sx,
                                                  cutlass::Array<ElementAcc, N> const& acc) {
      cutlass::Array<float, N> y;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) y[i] = deq(sx[i], sw[i], float(acc[i]));
      return y;
    }

    // Every table load is issued unconditionally (indices always inside the tables) and only the
    // stores are predicated, so a thread's loads overlap: behind per-pair branches they ran one L2
    // round trip at a time and the epilogue outlasted the other warp group's main loop (the GEMM
    // 1.8× slower, measured).
    template <class STensor, class SyncFn, class VTensor>
    CUTLASS_DEVICE void reduce(STensor&&, SyncFn const&, int epi_m, int epi_n, bool, VTensor visit_results) {
      using Frg = typename VTensor::value_type;
      constexpr int kF = Frg::kElements;
      constexpr int kS = kF * decltype(size(visit_results))::value;  // the thread's values in the subtile
      Tensor rel = tCcD(_, _, _, _0{}, _0{});                        // static: the pairs' pattern
      Tensor crd = tCcD(_, _, _, epi_m, epi_n);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kS; ++i) {
        int j = -1;  // the register 8 columns on in the same row, if the subtile holds it
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < kS; ++k)
          if (get<0>(rel(k)) == get<0>(rel(i)) && get<1>(rel(k)) == get<1>(rel(i)) + 8) j = k;
        if (j < 0) continue;
        const int m = m0 + get<0>(crd(i)), n = n0 + get<1>(crd(i)), c = n % kHd;
        const int t = (m % params.T) * (kHd / 2) + (c >> 4) * 8 + (c & 7);  // the pair's angle
        float x0 = visit_results(i / kF)[i % kF], x1 = visit_results(j / kF)[j % kF];
        rope_pair(x0, x1, __ldg(params.cos + t), __ldg(params.sin + t));
        if (n < params.rot && (c & 8) == 0) {  // a q or k head's even block: (i, i + hd/2)
          visit_results(i / kF)[i % kF] = x0;
          visit_results(j / kF)[j % kF] = x1;
        }
      }
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fu::detail::ConsumerStoreArgs<Args...> const& args) {
    auto [M, N, K, L] = args.problem_shape_mnkl;
    // residue_tCcD = (M, N) − the first register's absolute coordinates
    const int m0 = int(M) - int(get<0>(args.residue_tCcD)), n0 = int(N) - int(get<1>(args.residue_tCcD));
    return ConsumerStoreCallbacks<decltype(args.tCcD)>(args.tCcD, m0, n0, params);
  }
};

template <int kHd>
using Tree = fu::Sm90EVT<RopeDeq<kHd>, RowScale, ColScale, fu::Sm90AccFetch>;
}  // namespace
}  // namespace qt::cuda

// The epilogue keeps a tree's values in registers of its ElementCompute, the accumulator's type
// (int32) for a tree that names none: this one's are the fp32 values RoPE rotates.
template <int kHd, class... Children>
struct cutlass::epilogue::fusion::FusionCallbacksTraits<
    cutlass::epilogue::fusion::Sm90TreeVisitor<qt::cuda::RopeDeq<kHd>, Children...>> {
  using DispatchPolicy = void;
  using Callbacks = Sm90TreeVisitor<qt::cuda::RopeDeq<kHd>, Children...>;
  using Operation = FusionOperation;
  using CtaTile_MNK = void;
  using EpilogueTile_MN = void;
  using ElementCompute = float;
};

namespace qt::cuda {
namespace {
template <int kHd>
using Gemm = Q8Gemm<Tree<kHd>, cutlass::half_t, cutlass::epilogue::collective::EpilogueTileAuto>;

template <int kHd>
void run_rope(const int8_t* W, int out, int in, const float* sw, const int8_t* X, int n, const float* sx, int T,
              int rot, const float* cos, const float* sin, __half* D, cudaStream_t s) {
  run<Gemm<kHd>>("gemm_q8_rope", W, out, in, X, n, reinterpret_cast<cutlass::half_t*>(D),
                 {{sw}, {sx}, {}, {cos, sin, T, rot}}, s);
}
}  // namespace

void gemm_q8_rope(const int8_t* W, int out, int in, const float* sw, const int8_t* X, int n, const float* sx, int T,
                  int hd, int rot, const float* cos, const float* sin, __half* D, cudaStream_t s) {
  if (!q8_rope_fits(out, in, hd, rot)) throw std::logic_error("gemm_q8_rope: a shape q8_rope_fits refuses");
  if (hd == 64)
    run_rope<64>(W, out, in, sw, X, n, sx, T, rot, cos, sin, D, s);
  else
    run_rope<128>(W, out, in, sw, X, n, sx, T, rot, cos, sin, D, s);
}

#else  // built without CUTLASS: q8_fused_available() is false and the callers never get here

void gemm_q8_rope(const int8_t*, int, int, const float*, const int8_t*, int, const float*, int, int, int, const float*,
                  const float*, __half*, cudaStream_t) {
  throw std::logic_error("gemm_q8_rope: built without CUTLASS");
}

#endif

void pair_rope_blocks(void* rows, int heads, int hd, size_t row_bytes, cudaStream_t s, bool undo) {
  const int blocks = hd / 8, half = blocks / 2;
  const size_t block = 8 * row_bytes, head = size_t(hd) * row_bytes;
  DeviceBuffer tmp(size_t(heads) * head);
  char *r = static_cast<char*>(rows), *t = tmp.get<char>();
  QT_CUDA_CHECK(cudaMemcpyAsync(t, r, tmp.bytes(), cudaMemcpyDeviceToDevice, s));
  // block b of every head to position 2b (b < half) or 2(b − half) + 1: one strided copy per block
  for (int b = 0; b < blocks; ++b) {
    const int to = b < half ? 2 * b : 2 * (b - half) + 1;
    const size_t dst = size_t(undo ? b : to) * block, src = size_t(undo ? to : b) * block;
    QT_CUDA_CHECK(cudaMemcpy2DAsync(r + dst, head, t + src, head, block, heads, cudaMemcpyDeviceToDevice, s));
  }
  QT_CUDA_CHECK(cudaStreamSynchronize(s));  // tmp is freed on return
}

}  // namespace qt::cuda
