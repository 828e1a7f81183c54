// The fused attention kernel (attention_fused.h). Layout of the work, after FlashAttention-2's
// forward (Dao 2023, Algorithm 1, and the tile loop of Dao-AILab/flash-attention's
// csrc/flash_attn/src/flash_fwd_kernel.h), written here with raw mma.sync / ldmatrix / cp.async:
//   - a block of kWarps warps owns kM·16·kWarps queries of one (chunk, head); each warp owns kM
//     16-row MMA tiles of them, so every key or value fragment read from shared memory feeds kM MMAs;
//   - key and value tiles of kN keys are copied global → shared with cp.async, double buffered:
//     the next tile's copy runs under this tile's MMAs;
//   - S = Q·Kᵀ (m16n8k16, f16 in, fp32 accumulate) stays in registers; scale, soft-cap and the
//     causal / sliding-window mask apply there; the running row max m and sum l are fp32, the
//     output accumulator is rescaled by exp(m_old − m_new) when the max grows;
//   - P = exp(S − m) is rounded to f16 in registers — the MMA's C fragment of S is laid out as
//     the A fragment of P·V needs it — and O += P·V (V fragments by ldmatrix.trans);
//   - at the end O / l is written once, fp32.
// Rows of shared memory are padded by 8 halves (16 bytes), so the 8 rows one ldmatrix reads fall
// in distinct bank groups.
#include <cstdint>

#include "libquant/cuda/attention_fused.h"
#include "libquant/cuda/check.h"

namespace qt::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block
constexpr int kPad = 8;    // halves of padding per shared row

struct Params {
  const __half *q, *k, *v;
  float* out;
  const float* sinks;
  int T, group, ldq, ldkv, window;
  float scale, softcap;
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

// rows [r0, r0 + R) of a [T, ld] f16 matrix (columns 0 … D−1 from base) into shared [R][D + kPad]
template <int D, int R>
__device__ __forceinline__ void load_tile(__half* dst, const __half* base, int ld, int r0, int T, int tid) {
  constexpr int per_row = D / 8;  // 16-byte pieces
  for (int i = tid; i < R * per_row; i += kWarps * 32) {
    const int r = i / per_row, c = (i % per_row) * 8;
    const bool ok = r0 + r < T;
    cp_async16(dst + r * (D + kPad) + c, ok ? base + size_t(r0 + r) * ld + c : base, ok);
  }
}

// Grid: (query blocks, heads, chunks); the latest query blocks (the most keys) start first.
template <int D, int kM, int kN>
__global__ void __launch_bounds__(kWarps * 32) flash_fwd(Params p) {
  constexpr int S = D + kPad, kQ = kWarps * 16 * kM;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* sQ = reinterpret_cast<__half*>(smem);  // [kQ][S]
  __half* sK = sQ + kQ * S;                      // [2][kN][S]
  __half* sV = sK + 2 * kN * S;                  // [2][kN][S]

  const int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, c = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int q0 = qb * kQ, q_last = min(q0 + kQ, p.T) - 1;
  const size_t row0 = size_t(c) * p.T;
  const __half* Qg = p.q + row0 * p.ldq + size_t(h) * D;
  const __half* Kg = p.k + row0 * p.ldkv + size_t(h / p.group) * D;
  const __half* Vg = p.v + row0 * p.ldkv + size_t(h / p.group) * D;
  // key tiles [t_lo, t_hi]: from the oldest key the first query's window reaches to the last query
  const int t_lo = (p.window > 0 ? max(0, q0 - p.window + 1) : 0) / kN, t_hi = q_last / kN;
  // this warp's rows: wq0 … wq0 + 16·kM − 1
  const int wq0 = q0 + warp * 16 * kM;

  load_tile<D, kQ>(sQ, Qg, p.ldq, q0, p.T, tid);
  load_tile<D, kN>(sK, Kg, p.ldkv, t_lo * kN, p.T, tid);
  load_tile<D, kN>(sV, Vg, p.ldkv, t_lo * kN, p.T, tid);
  cp_async_commit();

  // Per thread: rows (lane / 4) and (lane / 4 + 8) of each of its kM tiles.
  float o[kM][D / 8][4];
  float m[kM][2], l[kM][2];
  const float sink = p.sinks ? p.sinks[h] : -INFINITY;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int d = 0; d < D / 8; ++d) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0;
#pragma unroll
    for (int i = 0; i < 2; ++i) m[mt][i] = sink, l[mt][i] = p.sinks && lane % 4 == 0 ? 1.0f : 0.0f;
  }

  for (int t = t_lo; t <= t_hi; ++t) {
    const int buf = (t - t_lo) & 1;
    if (t < t_hi) {
      load_tile<D, kN>(sK + (buf ^ 1) * kN * S, Kg, p.ldkv, (t + 1) * kN, p.T, tid);
      load_tile<D, kN>(sV + (buf ^ 1) * kN * S, Vg, p.ldkv, (t + 1) * kN, p.T, tid);
    }
    cp_async_commit();  // possibly empty: the wait below always leaves exactly the next tile in flight
    cp_async_wait<1>();
    __syncthreads();
    const int kbase = t * kN;
    // A tile wholly after this warp's last query adds nothing to its rows.
    if (kbase <= min(wq0 + 16 * kM - 1, p.T - 1)) {
      const __half* k_s = sK + buf * kN * S;
      const __half* v_s = sV + buf * kN * S;
      float s[kM][kN / 8][4];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt)
#pragma unroll
        for (int n = 0; n < kN / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[kM][4];
#pragma unroll
        for (int mt = 0; mt < kM; ++mt)
          ldsm_x4(a[mt],
                  sQ + (warp * 16 * kM + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + kk * 16 + (lane >> 4) * 8);
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
      // Masks where some key of the tile is after some query of the warp, or (window) before the
      // oldest key some query of the warp sees.
      const bool edge = kbase + kN - 1 > wq0 || (p.window > 0 && kbase <= wq0 + 16 * kM - 1 - p.window);
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int qi = wq0 + mt * 16 + (lane >> 2) + 8 * i;
          float mx = -INFINITY;
#pragma unroll
          for (int n = 0; n < kN / 8; ++n)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              float x = s[mt][n][2 * i + j] * p.scale;
              if (p.softcap > 0) x = tanhf(x / p.softcap) * p.softcap;
              if (edge) {
                const int kj = kbase + n * 8 + (lane & 3) * 2 + j;
                if (kj > qi || (p.window > 0 && kj <= qi - p.window)) x = -INFINITY;
              }
              s[mt][n][2 * i + j] = x;
              mx = fmaxf(mx, x);
            }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m[mt][i], mx);
          const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing seen yet stays 0
          const float alpha = __expf(m[mt][i] - base);
          m[mt][i] = m_new;
          float sum = 0;
#pragma unroll
          for (int n = 0; n < kN / 8; ++n)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const float e = __expf(s[mt][n][2 * i + j] - base);
              s[mt][n][2 * i + j] = e;
              sum += e;
            }
          l[mt][i] = l[mt][i] * alpha + sum;  // this thread's share; the quad's shares add up at the end
#pragma unroll
          for (int d = 0; d < D / 8; ++d) o[mt][d][2 * i] *= alpha, o[mt][d][2 * i + 1] *= alpha;
        }
      }
      // O += P·V over the tile's keys, 16 at a time.
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
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }

  const int ld = p.ldq;  // out has q's row layout
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
      float* dst = p.out + (row0 + qi) * ld + size_t(h) * D + (lane & 3) * 2;
#pragma unroll
      for (int d = 0; d < D / 8; ++d)
        *reinterpret_cast<float2*>(dst + d * 8) = make_float2(o[mt][d][2 * i] * inv, o[mt][d][2 * i + 1] * inv);
    }
}

template <int D, int kM, int kN>
void launch(const Params& p, int chunks, int nh, cudaStream_t s) {
  constexpr int kQ = kWarps * 16 * kM;
  constexpr size_t smem = size_t(kQ + 4 * kN) * (D + kPad) * sizeof(__half);
  // Over 48 KiB of dynamic shared memory is opted into once per kernel and device (the attribute
  // belongs to the device current when it is set: a pipeline's stages run on several).
  static uint64_t attr = 0;
  int dev = 0;
  QT_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 64 || !(attr >> dev & 1)) {
    QT_CUDA_CHECK(cudaFuncSetAttribute(flash_fwd<D, kM, kN>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    if (dev < 64) attr |= uint64_t(1) << dev;
  }
  const dim3 grid(unsigned((p.T + kQ - 1) / kQ), unsigned(nh), unsigned(chunks));
  flash_fwd<D, kM, kN><<<grid, kWarps * 32, smem, s>>>(p);
  QT_CUDA_LAUNCHED();
}

}  // namespace

bool fused_attention_fits(int hd) { return hd == 64 || hd == 128; }

void fused_attention(const __half* q, const __half* k, const __half* v, float* out, int chunks, int T, int nh, int nkv,
                     int hd, float scale, cudaStream_t s, int window, float softcap, const float* sinks, int tile) {
  if (chunks <= 0 || T <= 0) return;
  if (!fused_attention_fits(hd) || nkv <= 0 || nh % nkv != 0)
    throw std::logic_error("fused_attention: head dim 64 or 128 and whole groups of query heads only");
  const Params p{q, k, v, out, sinks, T, nh / nkv, nh * hd, nkv * hd, window, scale, softcap};
  if (tile == 0) tile = hd == 64 ? 2 : 2;
  if (hd == 64) {
    if (tile == 1) return launch<64, 1, 64>(p, chunks, nh, s);
    if (tile == 3) return launch<64, 2, 32>(p, chunks, nh, s);
    return launch<64, 2, 64>(p, chunks, nh, s);
  }
  if (tile == 1) return launch<128, 1, 64>(p, chunks, nh, s);
  if (tile == 3) return launch<128, 2, 32>(p, chunks, nh, s);
  launch<128, 2, 64>(p, chunks, nh, s);
}

}  // namespace qt::cuda
