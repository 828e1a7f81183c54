// gemm_q8_fused.h's q|k|v GEMM with RoPE in its epilogue (with CUTLASS; cutlass_q8.cuh).
//
// The epilogue runs in subtiles of 64 tokens × 128 channels, a whole tile's width: the wgmma
// accumulator layout gives each thread columns c + 8j (j = 0 … 15) of its rows, so the partner
// c + hd/2 of every channel of a head (hd 64 or 128, heads never straddling the 128-aligned tiles)
// sits in the same thread's registers. The node dequantizes each value in visit() (per fragment)
// and rotates the pairs in reduce(), which CUTLASS calls with the thread's whole subtile before
// converting it to f16 for the TMA store. (CUTLASS's default, narrower subtiles would need each
// head's rows reordered so that partners fall in one subtile, and the fused attention then reading
// q and k back in head order: measured slower in all, results/cuda.md.)
#include <stdexcept>

#include "libquant/cuda/gemm_q8_fused.h"

#ifdef QT_HAVE_CUTLASS
#include "libquant/cuda/cutlass_q8.cuh"
#endif

namespace qt::cuda {

std::vector<float> rope_cos_sin(const float* cos, const float* sin, size_t count) {
  std::vector<float> cs(2 * count);
  for (size_t i = 0; i < count; ++i) cs[2 * i] = cos[i], cs[2 * i + 1] = sin[i];
  return cs;
}

bool q8_rope_fits(int out, int in, int hd, int rot) {
  return in > 0 && in % 16 == 0 && out % 8 == 0 && (hd == 64 || hd == 128) && rot % hd == 0 && rot <= out;
}

#ifdef QT_HAVE_CUTLASS
namespace {
using namespace q8cutlass;

// The tree's root: y = sx · (sw · acc) per value (visit), then RoPE on columns below `rot` (reduce):
// pair (c, c + kHalf) of each head at row t's position t % T, angles from the (cos, sin) table.
template <int kHalf>
struct RopeDeq {
  struct SharedStorage {};
  struct Arguments {
    const float4* cs = nullptr;  // [T][kHalf / 2]: (cos, sin) of columns 2j and 2j + 1
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
    return a.T > 0 && a.rot % (2 * kHalf) == 0;
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

    // acc: the sums (Sm90AccFetch): int32 converted as float(acc) is (round to nearest), or fp32
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

    // Per two adjacent columns (c even, c + 1) of a head's lower half and their partners: one
    // 16-byte load of the interleaved table, issued whatever the columns (the index stays inside the
    // table) with only the stores predicated, so a thread's loads overlap — behind per-pair
    // branches they ran one L2 round trip at a time and the epilogue outlasted the other warp
    // group's main loop (the GEMM 1.8× slower, measured).
    template <class STensor, class SyncFn, class VTensor>
    CUTLASS_DEVICE void reduce(STensor&&, SyncFn const&, int epi_m, int epi_n, bool, VTensor visit_results) {
      using Frg = typename VTensor::value_type;
      constexpr int kF = Frg::kElements;
      constexpr int kS = kF * decltype(size(visit_results))::value;  // the thread's values in the subtile
      Tensor rel = tCcD(_, _, _, _0{}, _0{});                        // static: the pairs' pattern
      Tensor crd = tCcD(_, _, _, epi_m, epi_n);
      auto at = [&](int k) -> float& { return visit_results(k / kF)[k % kF]; };
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kS; ++i) {
        int i1 = -1, j0 = -1, j1 = -1;  // the registers at (row, col + 1), (row, col + kHalf), (row, col + 1 + kHalf)
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < kS; ++k) {
          if (get<0>(rel(k)) != get<0>(rel(i))) continue;
          const int d = get<1>(rel(k)) - get<1>(rel(i));
          if (d == 1) i1 = k;
          if (d == kHalf) j0 = k;
          if (d == kHalf + 1) j1 = k;
        }
        if (i1 < 0 || j0 < 0 || j1 < 0) continue;  // col odd (its column pair starts elsewhere), or no partners here
        const int m = m0 + get<0>(crd(i)), n = n0 + get<1>(crd(i));
        const float4 t = __ldg(params.cs + (m % params.T) * (kHalf / 2) + n % kHalf / 2);  // (cos, sin) of c, c + 1
        float a0 = at(i), b0 = at(j0), a1 = at(i1), b1 = at(j1);
        rope_pair(a0, b0, t.x, t.y);
        rope_pair(a1, b1, t.z, t.w);
        if (n < params.rot && n % (2 * kHalf) < kHalf) {  // a q or k head's lower half
          at(i) = a0, at(j0) = b0, at(i1) = a1, at(j1) = b1;
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

template <int kHalf>
using Tree = fu::Sm90EVT<RopeDeq<kHalf>, RowScale, ColScale, fu::Sm90AccFetch>;
}  // namespace
}  // namespace qt::cuda

// The epilogue keeps a tree's values in registers of its ElementCompute, the accumulator's type
// (int32) for a tree that names none: this one's are the fp32 values RoPE rotates.
template <int kHalf, class... Children>
struct cutlass::epilogue::fusion::FusionCallbacksTraits<
    cutlass::epilogue::fusion::Sm90TreeVisitor<qt::cuda::RopeDeq<kHalf>, Children...>> {
  using DispatchPolicy = void;
  using Callbacks = Sm90TreeVisitor<qt::cuda::RopeDeq<kHalf>, Children...>;
  using Operation = FusionOperation;
  using CtaTile_MNK = void;
  using EpilogueTile_MN = void;
  using ElementCompute = float;
};

namespace qt::cuda {
namespace {
template <int kHalf, class Code>
using Gemm = Q8Gemm<Tree<kHalf>, cutlass::half_t, Shape<_64, _128>, Code>;

template <int kHalf, class Code>
void run_rope(const void* W, int out, int in, const float* sw, const void* X, int n, const float* sx, int T, int rot,
              const float* cs, __half* D, cudaStream_t s) {
  run<Gemm<kHalf, Code>>("gemm_q8_rope", W, out, in, X, n, reinterpret_cast<cutlass::half_t*>(D),
                         {{sw}, {sx}, {}, {reinterpret_cast<const float4*>(cs), T, rot}}, s);
}

template <class Code>
void rope_by_head_dim(const void* W, int out, int in, const float* sw, const void* X, int n, const float* sx, int T,
                      int hd, int rot, const float* cs, __half* D, cudaStream_t s) {
  if (!q8_rope_fits(out, in, hd, rot)) throw std::logic_error("gemm_q8_rope: a shape q8_rope_fits refuses");
  if (hd == 64)
    run_rope<32, Code>(W, out, in, sw, X, n, sx, T, rot, cs, D, s);
  else
    run_rope<64, Code>(W, out, in, sw, X, n, sx, T, rot, cs, D, s);
}
}  // namespace

void gemm_q8_rope(const int8_t* W, int out, int in, const float* sw, const int8_t* X, int n, const float* sx, int T,
                  int hd, int rot, const float* cs, __half* D, cudaStream_t s) {
  rope_by_head_dim<int8_t>(W, out, in, sw, X, n, sx, T, hd, rot, cs, D, s);
}
void gemm_q8_rope(const __nv_fp8_e4m3* W, int out, int in, const float* sw, const __nv_fp8_e4m3* X, int n,
                  const float* sx, int T, int hd, int rot, const float* cs, __half* D, cudaStream_t s) {
  rope_by_head_dim<cutlass::float_e4m3_t>(W, out, in, sw, X, n, sx, T, hd, rot, cs, D, s);
}

#else  // built without CUTLASS: q8_fused_available() is false and the callers never get here

void gemm_q8_rope(const int8_t*, int, int, const float*, const int8_t*, int, const float*, int, int, int, const float*,
                  __half*, cudaStream_t) {
  throw std::logic_error("gemm_q8_rope: built without CUTLASS");
}
void gemm_q8_rope(const __nv_fp8_e4m3*, int, int, const float*, const __nv_fp8_e4m3*, int, const float*, int, int, int,
                  const float*, __half*, cudaStream_t) {
  throw std::logic_error("gemm_q8_rope: built without CUTLASS");
}

#endif

}  // namespace qt::cuda
