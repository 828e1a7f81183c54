// The fused attention kernel (attention_fused.h). Layout of the work, after FlashAttention-2's
// forward (Dao 2023, Algorithm 1, and the tile loop of Dao-AILab/flash-attention's
// csrc/flash_attn/src/flash_fwd_kernel.h), written here with raw mma.sync / ldmatrix / cp.async:
//   - a block of kWarps warps owns kP query positions of kHeads query heads of one chunk (kHeads > 1:
//     heads that share a kv head, so each K and V tile copied feeds all of them); each warp owns kM
//     16-row MMA tiles of one head, so every key or value fragment read from shared memory feeds kM
//     MMAs;
//   - key and value tiles of kN keys are copied global → shared with cp.async, double buffered:
//     the next tile's copy runs under this tile's MMAs; one barrier per tile;
//   - S = Q·Kᵀ (m16n8k16, f16 in, fp32 accumulate) stays in registers; the causal mask applies on
//     the tiles that cross a warp's diagonal only, scale, soft-cap and the sliding window (a second
//     instantiation) where the model has them; the running row max m and sum l are fp32, the
//     output accumulator is rescaled by exp(m_old − m_new) when some max of the warp grew;
//   - P = exp(S − m), one FFMA and one exp2 per score, is rounded to f16 in registers — the MMA's
//     C fragment of S is laid out as the A fragment of P·V needs it — and O += P·V (V fragments
//     by ldmatrix.trans);
//   - at the end O / l is written once, fp32.
// Rows of shared memory are padded by 8 halves (16 bytes), so the 8 rows one ldmatrix reads fall
// in distinct bank groups. At hd 128, 4 warps × kM 2 take 255 registers without spilling (the
// causal-only instantiation carries no soft-cap, window or sink state); check with -Xptxas -v.
#include <cstdint>

#include "libquant/cuda/attention_fused.h"
#include "libquant/cuda/check.h"

namespace qt::cuda {
namespace {

constexpr int kPad = 8;  // halves of padding per shared row
constexpr float kLog2e = 1.4426950408889634f;

struct Params {
  const __half *q, *k, *v;
  float* out;
  const float* sinks;
  int T, group, ldq, ldkv, ldo, window;  // row strides of q, of k and v, of out
  float scale, softcap;
  float scale_log2;  // scale · log2(e): raw scores straight to exp2's argument
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// 16 bytes global → shared; src_bytes 0 fills the 16 bytes with zeros (rows past the chunk's end).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// c (16×8 fp32) += a (16×16 f16, row) · b (16×8 f16, col)
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
// 2^x, one MUFU op (denormal results flushed to zero: they are below f16's range for P anyway)
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Rows [r0, r0 + R) of one or two [T, ld] f16 matrices (columns 0 … D−1 from a and b) into shared
// [R][D + kPad] each. Offsets within a chunk fit 32 bits: the loop-invariant parts the compiler
// hoists out of the tile loop then take one register each, shared by K and V.
template <int D, int R, int kThreads>
__device__ __forceinline__ void load_tiles(__half* da, const __half* a, __half* db, const __half* b, int ld, int r0,
                                           int T, int tid) {
  constexpr int per_row = D / 8;  // 16-byte pieces
  static_assert(R * per_row % kThreads == 0, "whole rounds of 16-byte copies");
  constexpr int kRounds = R * per_row / kThreads, kStep = kThreads / per_row;  // rows a round
  const int r = tid / per_row, c = tid % per_row * 8;
  uint32_t off = uint32_t(r0 + r) * uint32_t(ld) + c;
  const uint32_t step = uint32_t(kStep) * uint32_t(ld);
  __half *pa = da + r * (D + kPad) + c, *pb = db ? db + r * (D + kPad) + c : nullptr;
#pragma unroll
  for (int it = 0; it < kRounds; ++it) {
    const bool ok = r0 + r + it * kStep < T;
    cp_async16(pa + it * kStep * (D + kPad), a + (ok ? off : 0), ok);
    if (db) cp_async16(pb + it * kStep * (D + kPad), b + (ok ? off : 0), ok);
    off += step;
  }
}

// S = Q·Kᵀ for one warp's 16·kM query rows (q_s) and a tile of kN keys (k_s), fp32.
template <int D, int kM, int kN>
__device__ __forceinline__ void qk(float (&s)[kM][kN / 8][4], const __half* q_s, const __half* k_s, int lane) {
  constexpr int S = D + kPad;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int n = 0; n < kN / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[kM][4];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
      ldsm_x4(a[mt], q_s + (mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + kk * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int n = 0; n < kN / 8; n += 2) {
      uint32_t b[4];
      ldsm_x4(b, k_s + (n * 8 + (lane & 7) + (lane >> 4) * 8) * S + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        mma16816(s[mt][n], a[mt], b[0], b[1]);
        mma16816(s[mt][n + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// The online softmax over one tile's scores (keys kbase …) for one warp's rows (wq0 …): s becomes
// P = exp(S − max), the running max m and sum l advance, O is rescaled where the max grew.
// kGeneral: scale, soft-cap, window and sinks at run time (gemma, gpt_oss); otherwise causal only,
// and the scale rides on exp2's argument as one FFMA with the max subtracted (FlashAttention-2's
// softmax_rescale_o / scale_apply_exp2): the max is taken over the raw scores. kMask: some key of
// the tile lies after (or, with a window, too far before) some query of the warp; tiles without
// carry no per-element compare.
template <int D, int kM, int kN, bool kGeneral, bool kMask>
__device__ __forceinline__ void softmax(const Params& p, float (&s)[kM][kN / 8][4], int kbase, int wq0, int lane,
                                        float (&o)[kM][D / 8][4], float (&m)[kM][2], float (&l)[kM][2]) {
  // Scores in exp2 units: raw · scale·log2(e) (causal only), or scaled and capped · log2(e).
  const float f = kGeneral ? kLog2e : p.scale_log2;
  bool grew = false;
  float alpha[kM][2];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // key kbase + n·8 + (lane & 3)·2 + j is after query qi when n·8 + j > lim
      const int lim = wq0 + mt * 16 + (lane >> 2) + 8 * i - kbase - (lane & 3) * 2;
      float mx = m[mt][i];
#pragma unroll
      for (int n = 0; n < kN / 8; ++n)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float x = s[mt][n][2 * i + j];
          if constexpr (kGeneral) {
            x *= p.scale;
            if (p.softcap > 0) x = tanhf(x / p.softcap) * p.softcap;
          }
          if constexpr (kMask) {
            const int c = n * 8 + j;
            if (c > lim || (kGeneral && p.window > 0 && c <= lim - p.window)) x = -INFINITY;
          }
          s[mt][n][2 * i + j] = x;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base = mx == -INFINITY ? 0.0f : mx * f;  // a row with nothing seen yet stays 0
      alpha[mt][i] = exp2_approx(m[mt][i] * f - base);     // exactly 1 where the max held
      grew |= mx > m[mt][i];
      m[mt][i] = mx;
      float sum = 0;
#pragma unroll
      for (int n = 0; n < kN / 8; ++n)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float e = exp2_approx(fmaf(s[mt][n][2 * i + j], f, -base));
          s[mt][n][2 * i + j] = e;
          sum += e;
        }
      l[mt][i] = l[mt][i] * alpha[mt][i] + sum;  // this thread's share; the quad's shares add up at the end
    }
  }
  // Once the running maxima settle most tiles leave them alone: the whole warp skips the rescale.
  if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int d = 0; d < D / 8; ++d) {
        o[mt][d][0] *= alpha[mt][0], o[mt][d][1] *= alpha[mt][0];
        o[mt][d][2] *= alpha[mt][1], o[mt][d][3] *= alpha[mt][1];
      }
  }
}

// O += P·V over one tile's keys, 16 at a time; P rounded to f16 (the MMA's C fragment of S is laid
// out as the A fragment of P·V needs it).
template <int D, int kM, int kN>
__device__ __forceinline__ void pv(const float (&s)[kM][kN / 8][4], const __half* v_s, int lane,
                                   float (&o)[kM][D / 8][4]) {
  constexpr int S = D + kPad;
#pragma unroll
  for (int ks = 0; ks < kN / 16; ++ks) {
    uint32_t a[kM][4];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      a[mt][0] = pack_half2(s[mt][2 * ks][0], s[mt][2 * ks][1]);
      a[mt][1] = pack_half2(s[mt][2 * ks][2], s[mt][2 * ks][3]);
      a[mt][2] = pack_half2(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
      a[mt][3] = pack_half2(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
    }
#pragma unroll
    for (int d = 0; d < D / 8; d += 2) {
      uint32_t b[4];
      ldsm_x4_trans(b, v_s + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + d * 8 + (lane >> 4) * 8);
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        mma16816(o[mt][d], a[mt], b[0], b[1]);
        mma16816(o[mt][d + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Where one block works: grid (query blocks, heads / kHeads, chunks), heads fastest (the query heads
// of one kv head run side by side and share its K and V in L2), the latest query blocks (the most
// keys) first, chunk by chunk. kHeads > 1: the block takes kHeads query heads of one kv head over
// the same kP positions, kWarps / kHeads warps a head, so every K and V tile it copies feeds all
// their rows, and those rows span kP positions instead of kHeads·kP: fewer warps sit out the tiles
// on the causal diagonal.
template <int D, int kWarps, int kM, int kN, int kHeads>
struct Block {
  static constexpr int kWph = kWarps / kHeads, kP = kWph * 16 * kM;  // warps a head, positions a block
  int h, q0, t_lo, t_hi, t_diag, wq0, w_last;
  size_t row0;
  const __half *Kg, *Vg;
  __device__ Block(const Params& p, int warp, int window) {
    const int qb = gridDim.y - 1 - blockIdx.y;
    h = blockIdx.x * kHeads + warp / kWph;
    q0 = qb * kP;
    row0 = size_t(blockIdx.z) * p.T;
    const int g = blockIdx.x * kHeads / p.group;  // the kv head of all kHeads query heads
    Kg = p.k + row0 * p.ldkv + size_t(g) * D;
    Vg = p.v + row0 * p.ldkv + size_t(g) * D;
    // key tiles [t_lo, t_hi]: from the oldest key the first query's window reaches to the last query
    t_lo = (window > 0 ? max(0, q0 - window + 1) : 0) / kN;
    t_hi = (min(q0 + kP, p.T) - 1) / kN;
    // causal: tiles before t_diag lie wholly at or before the first query
    t_diag = (q0 + 1) / kN;
    wq0 = q0 + warp % kWph * 16 * kM;  // this warp's rows: wq0 … w_last
    w_last = min(wq0 + 16 * kM - 1, p.T - 1);
  }
};

// O / l, fp32, into out (q's row layout).
template <int D, int kM>
__device__ __forceinline__ void store_out(const Params& p, size_t row0, int h, int wq0, int lane,
                                          const float (&o)[kM][D / 8][4], const float (&l)[kM][2]) {
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = l[mt][i];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0 ? 1.0f / sum : 0.0f;
      const int qi = wq0 + mt * 16 + (lane >> 2) + 8 * i;
      if (qi >= p.T) continue;
      float* dst = p.out + (row0 + qi) * p.ldo + size_t(h) * D + (lane & 3) * 2;
#pragma unroll
      for (int d = 0; d < D / 8; ++d)
        *reinterpret_cast<float2*>(dst + d * 8) = make_float2(o[mt][d][2 * i] * inv, o[mt][d][2 * i + 1] * inv);
    }
}

template <int D, int kM>
__device__ __forceinline__ void init_rows(const Params& p, bool sinks, int h, int lane, float (&o)[kM][D / 8][4],
                                          float (&m)[kM][2], float (&l)[kM][2]) {
  const float sink = sinks ? p.sinks[h] : -INFINITY;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int d = 0; d < D / 8; ++d) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0;
#pragma unroll
    for (int i = 0; i < 2; ++i) m[mt][i] = sink, l[mt][i] = sinks && lane % 4 == 0 ? 1.0f : 0.0f;
  }
}

// Two K/V buffers: tile t + 1 is copied while tile t is computed, into the buffer tile t − 1 used;
// one barrier per tile (after it every warp is done with tile t − 1 and sees tile t).
template <int D, int kWarps, int kM, int kN, int kHeads, bool kGeneral>
__global__ void __launch_bounds__(kWarps * 32) flash_fwd(Params p) {
  constexpr int S = D + kPad, kThreads = kWarps * 32;
  using B = Block<D, kWarps, kM, kN, kHeads>;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* sQ = reinterpret_cast<__half*>(smem);  // [kHeads][kP][S]
  __half* sK = sQ + kHeads * B::kP * S;          // [2][kN][S]
  __half* sV = sK + 2 * kN * S;                  // [2][kN][S]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const B b(p, warp, kGeneral ? p.window : 0);
  const __half* q_s = sQ + warp * 16 * kM * S;

#pragma unroll
  for (int j = 0; j < kHeads; ++j) {
    const __half* Qg = p.q + b.row0 * p.ldq + size_t(blockIdx.x * kHeads + j) * D;
    load_tiles<D, B::kP, kThreads>(sQ + j * B::kP * S, Qg, nullptr, nullptr, p.ldq, b.q0, p.T, tid);
  }
  load_tiles<D, kN, kThreads>(sK, b.Kg, sV, b.Vg, p.ldkv, b.t_lo * kN, p.T, tid);
  cp_async_commit();

  // Per thread: rows (lane / 4) and (lane / 4 + 8) of each of its kM tiles.
  float o[kM][D / 8][4], m[kM][2], l[kM][2];
  init_rows<D, kM>(p, kGeneral && p.sinks, b.h, lane, o, m, l);

  for (int t = b.t_lo; t <= b.t_hi; ++t) {
    const int buf = (t - b.t_lo) & 1;
    cp_async_wait<0>();
    __syncthreads();
    if (t < b.t_hi)
      load_tiles<D, kN, kThreads>(sK + (buf ^ 1) * kN * S, b.Kg, sV + (buf ^ 1) * kN * S, b.Vg, p.ldkv, (t + 1) * kN,
                                  p.T, tid);
    cp_async_commit();
    const int kbase = t * kN;
    if (kbase > b.w_last) continue;  // a tile wholly after this warp's last query adds nothing to its rows
    float s[kM][kN / 8][4];
    qk<D, kM, kN>(s, q_s, sK + buf * kN * S, lane);
    if constexpr (kGeneral) {
      const int window = p.window;
      if (kbase + kN - 1 > b.wq0 || (window > 0 && kbase <= b.w_last - window))
        softmax<D, kM, kN, true, true>(p, s, kbase, b.wq0, lane, o, m, l);
      else
        softmax<D, kM, kN, true, false>(p, s, kbase, b.wq0, lane, o, m, l);
    } else if (t < b.t_diag) {
      softmax<D, kM, kN, false, false>(p, s, kbase, b.wq0, lane, o, m, l);
    } else {
      softmax<D, kM, kN, false, true>(p, s, kbase, b.wq0, lane, o, m, l);
    }
    pv<D, kM, kN>(s, sV + buf * kN * S, lane, o);
  }
  store_out<D, kM>(p, b.row0, b.h, b.wq0, lane, o, l);
}

template <int D, int kWarps, int kM, int kN, int kHeads, bool kGeneral>
void launch(const Params& p, int chunks, int nh, cudaStream_t s) {
  using B = Block<D, kWarps, kM, kN, kHeads>;
  constexpr size_t smem = size_t(kHeads * B::kP + 4 * kN) * (D + kPad) * sizeof(__half);
  auto* kernel = flash_fwd<D, kWarps, kM, kN, kHeads, kGeneral>;
  // Over 48 KiB of dynamic shared memory is opted into once per kernel and device (the attribute
  // belongs to the device current when it is set: a pipeline's stages run on several).
  static uint64_t attr = 0;
  int dev = 0;
  QT_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 64 || !(attr >> dev & 1)) {
    QT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    if (dev < 64) attr |= uint64_t(1) << dev;
  }
  const dim3 grid(unsigned(nh / kHeads), unsigned((p.T + B::kP - 1) / B::kP), unsigned(chunks));
  kernel<<<grid, kWarps * 32, smem, s>>>(p);
  QT_CUDA_LAUNCHED();
}

template <int D, int kWarps, int kM, int kN, int kHeads = 1>
void launch_any(const Params& p, int chunks, int nh, cudaStream_t s) {
  if (p.window > 0 || p.softcap > 0 || p.sinks)
    launch<D, kWarps, kM, kN, kHeads, true>(p, chunks, nh, s);
  else
    launch<D, kWarps, kM, kN, kHeads, false>(p, chunks, nh, s);
}

}  // namespace

bool fused_attention_fits(int hd) { return hd == 64 || hd == 128; }

void fused_attention(const __half* q, const __half* k, const __half* v, float* out, int chunks, int T, int nh, int nkv,
                     int hd, float scale, cudaStream_t s, int window, float softcap, const float* sinks, int tile,
                     int ld) {
  if (chunks <= 0 || T <= 0) return;
  if (!fused_attention_fits(hd) || nkv <= 0 || nh % nkv != 0)
    throw std::logic_error("fused_attention: head dim 64 or 128 and whole groups of query heads only");
  if (ld % 8 != 0) throw std::logic_error("fused_attention: rows of whole 16-byte units only");
  const int Q = nh * hd, ldq = ld ? ld : Q, ldkv = ld ? ld : nkv * hd;
  const Params p{q, k, v, out, sinks, T, nh / nkv, ldq, ldkv, Q, window, scale, softcap, scale * kLog2e};
  if (hd == 64) {
    if (tile == 1) return launch_any<64, 4, 1, 64>(p, chunks, nh, s);
    if (tile == 3) return launch_any<64, 4, 2, 32>(p, chunks, nh, s);
    return launch_any<64, 4, 2, 64>(p, chunks, nh, s);
  }
  // Default: two query heads of one kv head a block where the heads come in pairs (fastest at
  // both ctx 512 and 4096 on an H100, results/cuda.md), else 128 positions of one head.
  if (tile == 0) tile = p.group % 2 == 0 ? 5 : 2;
  if (tile == 1) return launch_any<128, 4, 1, 64>(p, chunks, nh, s);
  if (tile == 3) return launch_any<128, 4, 2, 32>(p, chunks, nh, s);
  if (tile == 4 && p.group % 4 == 0) return launch_any<128, 8, 2, 64, 4>(p, chunks, nh, s);
  if (tile == 5 && p.group % 2 == 0) return launch_any<128, 4, 2, 64, 2>(p, chunks, nh, s);
  launch_any<128, 4, 2, 64>(p, chunks, nh, s);
}

}  // namespace qt::cuda
