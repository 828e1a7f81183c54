// Attention over the bf16 cache (`--kv bf16`, cache.cpp): keys and values stored as bf16 in the
// operand layouts of VDPBF16PS, which multiplies 16 pairs of bf16 per instruction and adds both
// products into one fp32 lane (Intel SDM, VDPBF16PS):
//   kp: Kᵀ in pairs along the head dimension, kp[((d/2)·cap + j)·2 + d%2] = K[j][d]
//   vp: V in pairs along positions,          vp[((j/2)·D + d)·2 + j%2]   = V[j][d]
// per kv head, kp (cap·D values) then vp (cap·D), heads `head_stride` values apart; cap is a multiple
// of ops::kAttnKeyPad and the storage past the last position is finite.
//
// What is rounded: the cached K and V (on append), the queries and the softmax weights P, each to
// bf16 (round to nearest even, denormals flushed, as kernels/bf16.h); scores, the softmax and the
// output accumulate in fp32. That is what the AVX512-BF16 kernel computes; without AVX512-BF16, on
// CPUs with AMX (whose VDPBF16PS runs at a third of the FMA rate), with a head dimension that is not
// a multiple of 16, or on a masked layer (soft-cap, sliding window, sinks), the values are widened
// (exactly) into the fp32 cache's layout and ops::attention (or attention_masked) runs on them with
// bf16-rounded queries and unrounded P.
#pragma once
#include <cstdint>

namespace qt::kv {

struct Bf16Layout {
  const uint16_t* base;  // kv head 0's kp
  int64_t cap;           // positions a head's block holds
  int64_t head_stride;   // values between consecutive kv heads' blocks
};

// The value offsets of K[j][d] and V[j][d] inside one kv head's block.
inline int64_t bf16_k_index(int64_t cap, int j, int d) { return ((d / 2) * cap + j) * 2 + d % 2; }
inline int64_t bf16_v_index(int64_t cap, int D, int j, int d) { return cap * D + ((j / 2) * D + d) * 2 + j % 2; }

// Causal attention as ops::attention (same arguments and masks), reading the bf16 layout.
// `softcap`, `window`, `sinks`: as ops::attention_masked (0 / 0 / null: the plain causal mask).
// Honours ops::ShareAttention.
void attention_bf16(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads, int D,
                    float scale, const Bf16Layout& kv, float* out, int64_t out_stride, float softcap = 0,
                    int window = 0, const float* sinks = nullptr);

// The AVX512-BF16 kernel's computation in double (scores and P·V summed in double from the
// bf16-rounded operands, P rounded to bf16 as the kernel rounds it): the spec for the tests.
void attention_bf16_ref(const float* q, int64_t q_stride, int n_q, int first_pos, int n_heads, int n_kv_heads, int D,
                        float scale, const Bf16Layout& kv, float* out, int64_t out_stride);

}  // namespace qt::kv
