// The quantized KV methods on the GPU (kv.h): encode, decode into the domain, WHT rotations and
// the decode-mode softmax. Every encode kernel computes what the CPU codec's encode computes,
// operation for operation in fp32 (IEEE division and square roots, min/max exact, the WHT's
// butterflies in the CPU's order, thresholds counted), so the bytes are the CPU's.
#include <algorithm>
#include <cmath>
#include <vector>

#include "formats/error.h"
#include "libquant/cuda/check.h"
#include "libquant/cuda/kv.h"
#include "libquant/cuda/kv_host.h"
#include "libquant/cuda/reduce.cuh"
#include "libquant/kv/artifacts.h"
#include "libquant/kv/codec.h"

namespace qt::cuda {

namespace {

constexpr int kMaxD = 1024;

// ----------------------------------------------------------------------------- device helpers

// f16 bits of a float (round to nearest even) and back, through __half_raw.
// (The bits pass through an opaque move: with a plain cast, ptxas stored the low byte of a
// cvt.rn.f16.f32 register as the value converted to an integer — the side data came out wrong.)
__device__ __forceinline__ uint16_t f16_bits(float v) {
  unsigned short b;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(v));
  uint32_t w = b;
  asm volatile("" : "+r"(w));
  return uint16_t(w);
}
__device__ __forceinline__ float f16_value(uint16_t b) {
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}
// The CPU's fit(): scale = f16((max − min)/(L − 1)), min = f16(min), both widened back.
__device__ __forceinline__ void fit_minmax(float mn, float mx, int levels, float* sc, float* m0, uint16_t* hs,
                                           uint16_t* hm) {
  *hs = f16_bits(__fdiv_rn(__fsub_rn(mx, mn), float(levels - 1)));
  *hm = f16_bits(mn);
  *sc = f16_value(*hs);
  *m0 = f16_value(*hm);
}
__device__ __forceinline__ uint32_t code_of(float x, float sc, float mn, int levels) {
  if (!(sc > 0)) return 0;
  const float u = rintf(__fdiv_rn(__fsub_rn(x, mn), sc));
  return uint32_t(fminf(fmaxf(u, 0.0f), float(levels - 1)));
}
__device__ __forceinline__ void put_half(uint8_t* p, uint16_t b) {
  uint32_t w = b;
  asm volatile("" : "+r"(w));
  p[0] = uint8_t(w & 0xffu);
  p[1] = uint8_t((w >> 8) & 0xffu);
}
__device__ __forceinline__ float get_half(const uint8_t* p) { return f16_value(uint16_t(p[0] | (p[1] << 8))); }
// Code i of `bits` bits from an LSB-first stream.
__device__ __forceinline__ uint32_t get_code(const uint8_t* p, int64_t bit, int bits) {
  const int64_t byte = bit >> 3;
  const int sh = int(bit & 7);
  uint32_t w = p[byte];
  if (sh + bits > 8) w |= uint32_t(p[byte + 1]) << 8;
  return (w >> sh) & ((1u << bits) - 1u);
}
// Byte b of the stream of n codes (uint8 each, `bits` bits) starting at bit 0.
__device__ __forceinline__ uint8_t pack_byte(const uint8_t* codes, int n, int bits, int b) {
  uint32_t v = 0;
  for (int i = 0; i < 8; ++i) {
    const int p = 8 * b + i, c = p / bits;
    if (c < n && ((codes[c] >> (p % bits)) & 1u)) v |= 1u << i;
  }
  return uint8_t(v);
}

// In-place unnormalized WHT of the D floats at y, by the D threads x of this vector (all the
// block's threads reach every barrier): the CPU's butterflies (fwht, random.cpp).
__device__ __forceinline__ void fwht_block(float* y, int D) {
  const int c = threadIdx.x;
  for (int h = 1; h < D; h *= 2) {
    __syncthreads();
    if (!(c & h)) {
      const float a = y[c], b = y[c + h];
      y[c] = a + b;
      y[c + h] = a - b;
    }
  }
  __syncthreads();
}

// Vectors per block of D threads each: blockDim = (D, V).
inline dim3 vec_block(int D) { return dim3(unsigned(D), unsigned(std::max(1, 256 / D))); }

// ----------------------------------------------------------------------------- encode

// affine per token (and kivi values): vector vi = (chunk c, position j < enc, kv head h).
__global__ void enc_affine_kernel(const __half* x, int T, int nkv, int D, int enc, int64_t nvec, int bits, int group,
                                  size_t code_bytes, size_t gb, int64_t groups, uint8_t* codes) {
  extern __shared__ float sm[];
  const int V = blockDim.y, c = threadIdx.x;
  float* xs = sm + threadIdx.y * D;
  float* sc = sm + V * D + threadIdx.y * 2 * (D / group);
  uint8_t* cs = reinterpret_cast<uint8_t*>(sm + V * D + V * 2 * (D / group)) + threadIdx.y * D;
  const int64_t vi = int64_t(blockIdx.x) * V + threadIdx.y;
  const bool live = vi < nvec;
  int64_t ch = 0, j = 0, h = 0;
  if (live) h = vi % nkv, j = (vi / nkv) % enc, ch = vi / nkv / enc;
  uint8_t* out = codes + ((ch * nkv + h) * groups + j) * gb;
  if (live) xs[c] = __half2float(x[((ch * T + j) * nkv + h) * D + c]);
  __syncthreads();
  const int L = 1 << bits;
  if (live && c % group == 0) {
    float mn = xs[c], mx = xs[c];
    for (int i = 1; i < group; ++i) mn = fminf(mn, xs[c + i]), mx = fmaxf(mx, xs[c + i]);
    uint16_t hs, hm;
    float s, m;
    fit_minmax(mn, mx, L, &s, &m, &hs, &hm);
    const int g = c / group;
    sc[2 * g] = s, sc[2 * g + 1] = m;
    put_half(out + code_bytes + g * 4, hs);
    put_half(out + code_bytes + g * 4 + 2, hm);
  }
  __syncthreads();
  if (live) {
    const int g = c / group;
    cs[c] = uint8_t(code_of(xs[c], sc[2 * g], sc[2 * g + 1], L));
  }
  __syncthreads();
  if (live && size_t(c) < code_bytes) out[c] = pack_byte(cs, D, bits, c);
}

// kivi keys: block (chunk c, group g < enc/G, kv head h), thread = channel; codes token-major.
__global__ void enc_kivi_kernel(const __half* x, int T, int nkv, int D, int G, int bits, size_t code_bytes, size_t gb,
                                int64_t groups, int enc_groups, uint8_t* codes) {
  extern __shared__ uint8_t cs[];  // G·D codes
  const int c = threadIdx.x;
  const int h = blockIdx.x % nkv, g = (blockIdx.x / nkv) % enc_groups, ch = blockIdx.x / nkv / enc_groups;
  uint8_t* out = codes + ((int64_t(ch) * nkv + h) * groups + g) * gb;
  const int L = 1 << bits;
  auto at = [&](int t) { return __half2float(x[((int64_t(ch) * T + int64_t(g) * G + t) * nkv + h) * D + c]); };
  if (c < D) {
    float mn = at(0), mx = mn;
    for (int t = 1; t < G; ++t) {
      const float v = at(t);
      mn = fminf(mn, v), mx = fmaxf(mx, v);
    }
    uint16_t hs, hm;
    float s, m;
    fit_minmax(mn, mx, L, &s, &m, &hs, &hm);
    put_half(out + code_bytes + c * 4, hs);
    put_half(out + code_bytes + c * 4 + 2, hm);
    for (int t = 0; t < G; ++t) cs[t * D + c] = uint8_t(code_of(at(t), s, m, L));
  }
  __syncthreads();
  for (size_t b = c; b < code_bytes; b += blockDim.x) out[b] = pack_byte(cs, G * D, bits, int(b));
}

// turboquant_mse: n = ‖x‖ (a double sum in index order, as l2_norm), y = WHT(s ⊙ x)/√D / n, the
// index of each coordinate = thresholds below it; the first n_hi coordinates on the hi codebook.
__global__ void enc_turbo_kernel(const __half* x, int T, int nkv, int D, int enc, int64_t nvec, const float* signs,
                                 const float* t_lo, int nt_lo, const float* t_hi, int nt_hi, int n_hi, int bh, int bl,
                                 size_t code_bytes, size_t gb, int64_t groups, uint8_t* codes) {
  extern __shared__ float sm[];
  const int V = blockDim.y, c = threadIdx.x;
  float* y = sm + threadIdx.y * D;
  float* nrm = sm + V * D + threadIdx.y;
  uint8_t* cs = reinterpret_cast<uint8_t*>(sm + V * D + V) + threadIdx.y * D;
  const int64_t vi = int64_t(blockIdx.x) * V + threadIdx.y;
  const bool live = vi < nvec;
  int64_t ch = 0, j = 0, h = 0;
  if (live) h = vi % nkv, j = (vi / nkv) % enc, ch = vi / nkv / enc;
  uint8_t* out = codes + ((ch * nkv + h) * groups + j) * gb;
  const float xv = live ? __half2float(x[((ch * T + j) * nkv + h) * D + c]) : 0.0f;
  y[c] = xv;
  __syncthreads();
  if (c == 0) {
    double s = 0;
    for (int i = 0; i < D; ++i) s += double(y[i]) * double(y[i]);
    *nrm = float(sqrt(s));
  }
  __syncthreads();
  const float n = *nrm;
  y[c] = __fmul_rn(xv, signs[c]);
  fwht_block(y, D);
  const float inv_d = __fdiv_rn(1.0f, __fsqrt_rn(float(D)));
  const float inv_n = __fdiv_rn(1.0f, n);
  const float yc = __fmul_rn(__fmul_rn(y[c], inv_d), inv_n);
  uint32_t idx = 0;
  if (c < n_hi)
    for (int k = 0; k < nt_hi; ++k) idx += yc > t_hi[k];
  else
    for (int k = 0; k < nt_lo; ++k) idx += yc > t_lo[k];
  cs[c] = n == 0 ? 0 : uint8_t(idx);
  __syncthreads();
  if (!live) return;
  if (c == 0) put_half(out + code_bytes, f16_bits(n));
  if (size_t(c) < code_bytes) {
    uint32_t v = 0;
    const int hi_bits = n_hi * bh;
    for (int i = 0; i < 8; ++i) {
      const int p = 8 * c + i;
      int code, bit;
      if (p < hi_bits) {
        code = p / bh, bit = p % bh;
      } else {
        const int q = p - hi_bits;
        code = n_hi + q / bl, bit = q % bl;
        if (code >= D) continue;
      }
      if ((cs[code] >> bit) & 1u) v |= 1u << i;
    }
    out[c] = uint8_t(v);
  }
}

// ----------------------------------------------------------------------------- decode

// dom[vector (chunk, position j, kv head)] = decode(j) for j < enc, else x (rotated when the
// domain is). One vector per threadIdx.y, channels on x.
__global__ void dec_kernel(int kind, const uint8_t* codes, const __half* x, int T, int nkv, int D, int enc,
                           int64_t nvec, int bits, int group, int G, const float* c_lo, const float* c_hi, int n_hi,
                           int bh, int bl, const float* signs, size_t code_bytes, size_t gb, int64_t groups,
                           __half* dom) {
  extern __shared__ float sm[];
  const int V = blockDim.y, c = threadIdx.x;
  float* y = sm + threadIdx.y * D;
  const int64_t vi = int64_t(blockIdx.x) * V + threadIdx.y;
  const bool live = vi < nvec;
  int64_t ch = 0, j = 0, h = 0;
  if (live) h = vi % nkv, j = (vi / nkv) % T, ch = vi / nkv / T;
  const int64_t row = ((ch * T + j) * nkv + h) * D;
  const uint8_t* base = codes + (ch * nkv + h) * groups * gb;
  const bool coded = live && j < enc;
  float o = 0;
  if (coded) {
    if (kind == KvSideGpu::Affine) {
      const uint8_t* p = base + j * gb;
      const int g = c / group;
      const float sc = get_half(p + code_bytes + g * 4), mn = get_half(p + code_bytes + g * 4 + 2);
      o = float(get_code(p, int64_t(c) * bits, bits)) * sc + mn;
    } else if (kind == KvSideGpu::KiviKey) {
      const uint8_t* p = base + (j / G) * gb;
      const int t = int(j % G);
      const float sc = get_half(p + code_bytes + c * 4), mn = get_half(p + code_bytes + c * 4 + 2);
      o = float(get_code(p, (int64_t(t) * D + c) * bits, bits)) * sc + mn;
    } else {  // turboquant_mse
      const uint8_t* p = base + j * gb;
      const float nn = get_half(p + code_bytes);
      o = c < n_hi ? nn * c_hi[get_code(p, int64_t(c) * bh, bh)]
                   : nn * c_lo[get_code(p, int64_t(n_hi) * bh + int64_t(c - n_hi) * bl, bl)];
    }
  }
  if (kind == KvSideGpu::TurboMse) {  // the exact window in the rotated domain (every thread reaches the barriers)
    const float xv = live && !coded ? __half2float(x[row + c]) : 0.0f;
    y[c] = __fmul_rn(xv, signs[c]);
    fwht_block(y, D);
    if (live && !coded) o = __fmul_rn(y[c], __fdiv_rn(1.0f, __fsqrt_rn(float(D))));
  } else if (live && !coded) {
    o = __half2float(x[row + c]);
  }
  if (live) dom[row + c] = __float2half_rn(o);
}

__global__ void rotate_kernel(const __half* x, int D, int64_t nvec, const float* signs, __half* y) {
  extern __shared__ float sm[];
  const int c = threadIdx.x;
  float* w = sm + threadIdx.y * D;
  const int64_t vi = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = vi < nvec;
  w[c] = live ? __fmul_rn(__half2float(x[vi * D + c]), signs[c]) : 0.0f;
  fwht_block(w, D);
  if (live) y[vi * D + c] = __float2half_rn(__fmul_rn(w[c], __fdiv_rn(1.0f, __fsqrt_rn(float(D)))));
}

// x = Πᵀ y: fwht(y), then x[i] = y[i] · (inv · s[i]) (Rotation::inverse).
__global__ void unrotate_kernel(float* y, int D, int64_t nvec, const float* signs) {
  extern __shared__ float sm[];
  const int c = threadIdx.x;
  float* w = sm + threadIdx.y * D;
  const int64_t vi = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = vi < nvec;
  w[c] = live ? y[vi * D + c] : 0.0f;
  fwht_block(w, D);
  if (live) y[vi * D + c] = __fmul_rn(w[c], __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(float(D))), signs[c]));
}

constexpr int kWarps = 8;
__global__ void window_softmax_kernel(const float* Sq, const float* Se, int64_t rows, int T, float scale, KvBound kb,
                                      KvBound vb, __half* Pq, __half* Pe, int band) {
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= rows) return;
  const int lane = threadIdx.x & 31, last = int(r % T);
  const int bk = Se ? int(kb.at(last + 1)) : last + 1, bv = Pe ? int(vb.at(last + 1)) : last + 1;
  // The exact side's row: all T keys, or (band) 2·band keys from ks.
  const int ks = band > 0 ? band_start(last / band, band, T) : 0, we = band > 0 ? 2 * band : T;
  const float* sq = Sq + r * T;
  const float* se = Se ? Se + r * we - ks : nullptr;
  auto s = [&](int j) { return (j < bk ? sq[j] : se[j]) * scale; };
  float m = -INFINITY;
  for (int j = lane; j <= last; j += 32) m = fmaxf(m, s(j));
  m = warp_max(m);
  float sum = 0;
  for (int j = lane; j <= last; j += 32) sum += expf(s(j) - m);
  sum = warp_sum(sum);
  const float inv = 1.0f / sum;
  __half* pq = Pq + r * T;
  for (int j = lane; j < T; j += 32) pq[j] = __float2half_rn(j <= last && j < bv ? expf(s(j) - m) * inv : 0.0f);
  if (Pe) {
    __half* pe = Pe + r * we;
    for (int i = lane; i < we; i += 32) {
      const int j = ks + i;
      pe[i] = __float2half_rn(j <= last && j >= bv ? expf(s(j) - m) * inv : 0.0f);
    }
  }
}

DeviceBuffer upload(const std::vector<float>& v) {
  DeviceBuffer b(std::max<size_t>(1, v.size()) * sizeof(float));
  if (!v.empty()) QT_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return b;
}

}  // namespace

// ------------------------------------------------------------------------------- host side

KvBound KvSideGpu::bound() const {
  KvBound b;
  if (kind == Exact) return b;
  if (G == 1) {
    b.kind = 1, b.R = R;
  } else {
    b.kind = 2, b.U = R > 0 ? R : G;
  }
  return b;
}

KvSideGpu make_kv_side(const kv::KVSpec& spec, bool key, const kv::KVConfig& cfg, int D, int n_layers,
                       const std::vector<float>& rope_inv_freq) {
  KvSideGpu s;
  s.D = D;
  s.spec = spec.text();
  const std::string flag = key ? "--kv-k " : "--kv-v ";
  auto not_yet = [&](const std::string& why) { user_error("{}{}: {}: not on cuda yet", flag, spec.text(), why); };
  if (spec.method == "f16") {
    if (!spec.params.empty()) user_error("{}{}: full-precision caches take no parameters", flag, spec.text());
    return s;
  }
  if (spec.method == "f32") not_yet("cuda keeps f16 keys and values (use f16)");
  if (!kv::kv_method_on_cuda(spec.method)) not_yet("cuda runs " + kv::cuda_kv_method_names());
  if (D > kMaxD) not_yet("head dimension " + std::to_string(D) + " (cuda: up to 1024)");
  // The CPU's table first: its messages for bad methods, bits and parameters; the codebooks.
  kv::KVContext ctx;
  ctx.head_dim = D;
  ctx.seed = cfg.seed;
  std::unique_ptr<kv::Codec> cpu;
  if (kv::kv_method_cuda(spec.method) == kv::CudaKv::Native) {
    if (!cfg.artifacts.empty()) ctx.artifacts = kv::Artifacts::load(cfg.artifacts, D, cfg.seed);
    cpu = kv::make_codec(spec, key ? kv::Side::Key : kv::Side::Value, ctx);
  } else {
    s.host = std::make_shared<HostCodecs>(spec, key, cfg, D, n_layers, rope_inv_freq);
  }
  s.G = cpu ? cpu->token_group() : s.host->token_group();
  s.group_bytes = cpu ? cpu->group_bytes() : s.host->group_bytes();
  const double r = spec.number("r", spec.method == "kivi" && cfg.residual < 0 ? 128 : std::max(0, cfg.residual), flag);
  s.R = int(r);
  if (r < 0 || r != std::floor(r)) user_error("kv: r={} is not a token count", r);
  if (s.G > 1 && s.R % s.G)
    user_error("{}{}: the residual window {} is not a multiple of the group of {} tokens", flag, spec.text(), s.R, s.G);
  // The native kernels' parameters; the rest of a native method's variants through its CPU codec.
  const bool native =
      cpu && (spec.method == "affine" || spec.method == "kivi"
                  ? spec.str("rot", "none") == "none" && !(spec.method == "kivi" && key && size_t(s.G) * D > 48 * 1024)
                  : spec.str("rot", "wht") == "wht");
  if (!native) {
    s.kind = KvSideGpu::HostCodec;
    if (!s.host) s.host = std::make_shared<HostCodecs>(spec, key, cfg, D, n_layers, rope_inv_freq);
    return s;
  }
  if (spec.method == "affine" || spec.method == "kivi") {
    s.bits = int(spec.number("bits", spec.method == "affine" ? 4 : 2, flag));
    s.group = int(spec.number("group", 32, flag));
    if (spec.method == "kivi" && key) {
      s.kind = KvSideGpu::KiviKey;
      s.code_bytes = kv::packed_bytes(int64_t(D) * s.G, s.bits);  // G·D ≤ 48 KiB of shared memory (else HostCodec)
    } else {
      s.kind = KvSideGpu::Affine;
      s.code_bytes = kv::packed_bytes(D, s.bits);
    }
    return s;
  }
  // turboquant_mse (codec_table.cpp's make_turboquant_mse_row), rot=wht
  s.kind = KvSideGpu::TurboMse;
  const double bits = spec.number("bits", 3, flag);
  const int b = int(std::floor(bits));
  if (spec.has("n_outlier")) {
    s.bl = b, s.n_hi = int(spec.number("n_outlier", 0, flag));
    s.bh = int(spec.number("outlier_bits", std::min(b + 1, 4), flag));
  } else if (bits == b) {
    s.bl = b, s.bh = b, s.n_hi = D;
  } else {
    s.bl = b, s.bh = b + 1, s.n_hi = int(std::lround((bits - b) * D));
  }
  const kv::KVContext::FloatCodebook lo = ctx.codebook(kv::Density::Sphere, s.bl, D),
                                     hi = ctx.codebook(kv::Density::Sphere, s.bh, D);
  s.c_lo = upload(lo.c), s.t_lo = upload(lo.t), s.c_hi = upload(hi.c), s.t_hi = upload(hi.t);
  s.nt_lo = int(lo.t.size()), s.nt_hi = int(hi.t.size());
  s.signs = upload(ctx.rotation("wht").matrix());
  s.code_bytes = kv::packed_bytes(int64_t(s.n_hi) * s.bh + int64_t(D - s.n_hi) * s.bl, 1);
  if (s.code_bytes + 2 != s.group_bytes)
    throw std::logic_error("cuda kv: turboquant_mse layout differs from the CPU's");
  return s;
}

void check_kv(const kv::KVConfig& cfg, int head_dim, const std::vector<float>& rope_inv_freq) {
  if (!cfg.k.empty()) GpuKv g(cfg, head_dim, rope_inv_freq);
}

void kv_encode(const KvSideGpu& s, const __half* x, int B, int T, int nkv, uint8_t* codes, cudaStream_t st) {
  if (s.kind == KvSideGpu::HostCodec) throw std::logic_error("kv_encode: a host-codec side");
  if (s.kind == KvSideGpu::Exact || B <= 0) return;
  const int enc = int(s.bound().at(T)), D = s.D;
  if (enc <= 0) return;
  const int64_t groups = s.groups(T);
  if (s.kind == KvSideGpu::KiviKey) {
    const int eg = enc / s.G;
    const unsigned threads = unsigned((D + 31) / 32 * 32);
    enc_kivi_kernel<<<unsigned(int64_t(B) * eg * nkv), threads, size_t(s.G) * D, st>>>(
        x, T, nkv, D, s.G, s.bits, s.code_bytes, s.group_bytes, groups, eg, codes);
    QT_CUDA_LAUNCHED();
    return;
  }
  const dim3 blk = vec_block(D);
  const int64_t nvec = int64_t(B) * enc * nkv;
  const unsigned grid = unsigned((nvec + blk.y - 1) / blk.y);
  if (s.kind == KvSideGpu::Affine) {
    const size_t shm = blk.y * (D * 4 + 2 * (D / s.group) * 4 + D);
    enc_affine_kernel<<<grid, blk, shm, st>>>(x, T, nkv, D, enc, nvec, s.bits, s.group, s.code_bytes, s.group_bytes,
                                              groups, codes);
  } else {
    const size_t shm = blk.y * (D * 4 + 4 + D);
    enc_turbo_kernel<<<grid, blk, shm, st>>>(x, T, nkv, D, enc, nvec, s.signs.get<float>(), s.t_lo.get<float>(),
                                             s.nt_lo, s.t_hi.get<float>(), s.nt_hi, s.n_hi, s.bh, s.bl, s.code_bytes,
                                             s.group_bytes, groups, codes);
  }
  QT_CUDA_LAUNCHED();
}

void kv_decode(const KvSideGpu& s, const uint8_t* codes, const __half* x, int B, int T, int nkv, __half* dom,
               cudaStream_t st) {
  if (s.kind == KvSideGpu::HostCodec) throw std::logic_error("kv_decode: a host-codec side");
  if (B <= 0) return;
  if (s.kind == KvSideGpu::Exact) {
    QT_CUDA_CHECK(cudaMemcpyAsync(dom, x, size_t(B) * T * nkv * s.D * 2, cudaMemcpyDeviceToDevice, st));
    return;
  }
  const int enc = int(s.bound().at(T)), D = s.D;
  const dim3 blk = vec_block(D);
  const int64_t nvec = int64_t(B) * T * nkv;
  const unsigned grid = unsigned((nvec + blk.y - 1) / blk.y);
  const bool rot = s.rotated();
  dec_kernel<<<grid, blk, rot ? blk.y * D * 4 : 0, st>>>(
      s.kind, codes, x, T, nkv, D, enc, nvec, s.bits, s.group, s.G, rot ? s.c_lo.get<float>() : nullptr,
      rot ? s.c_hi.get<float>() : nullptr, s.n_hi, s.bh, s.bl, rot ? s.signs.get<float>() : nullptr, s.code_bytes,
      s.group_bytes, s.groups(T), dom);
  QT_CUDA_LAUNCHED();
}

void kv_rotate(const KvSideGpu& s, const __half* x, int64_t vectors, __half* y, cudaStream_t st) {
  if (vectors <= 0) return;
  const dim3 blk = vec_block(s.D);
  rotate_kernel<<<unsigned((vectors + blk.y - 1) / blk.y), blk, blk.y * s.D * 4, st>>>(x, s.D, vectors,
                                                                                       s.signs.get<float>(), y);
  QT_CUDA_LAUNCHED();
}

void kv_unrotate(const KvSideGpu& s, float* y, int64_t vectors, cudaStream_t st) {
  if (vectors <= 0) return;
  const dim3 blk = vec_block(s.D);
  unrotate_kernel<<<unsigned((vectors + blk.y - 1) / blk.y), blk, blk.y * s.D * 4, st>>>(y, s.D, vectors,
                                                                                         s.signs.get<float>());
  QT_CUDA_LAUNCHED();
}

void window_softmax(const float* Sq, const float* Se, int64_t rows, int T, float scale, KvBound kb, KvBound vb,
                    __half* Pq, __half* Pe, int band, cudaStream_t st) {
  if (rows <= 0) return;
  window_softmax_kernel<<<unsigned((rows + kWarps - 1) / kWarps), 32 * kWarps, 0, st>>>(Sq, Se, rows, T, scale, kb, vb,
                                                                                        Pq, Pe, band);
  QT_CUDA_LAUNCHED();
}

// ------------------------------------------------------------------------------- GpuKv

GpuKv::GpuKv(const kv::KVConfig& cfg, int D, const std::vector<float>& rope_inv_freq) {
  if (cfg.k.empty() || cfg.v.empty()) throw std::logic_error("GpuKv: empty config");
  for (size_t l = 1; l < cfg.k.size(); ++l)
    if (cfg.k[l].text() != cfg.k[0].text() || cfg.v[l].text() != cfg.v[0].text())
      user_error("kv: a different method per layer: not on cuda yet");
  if (cfg.key_center) user_error("--kv-key-center: not on cuda yet");
  if (cfg.stats) user_error("--kv-stats: not on cuda yet");
  k_ = make_kv_side(cfg.k[0], true, cfg, D, int(cfg.k.size()), rope_inv_freq);
  v_ = make_kv_side(cfg.v[0], false, cfg, D, int(cfg.v.size()), rope_inv_freq);
  decode_ = cfg.mode == kv::KVMode::Decode;
}

size_t GpuKv::scratch_bytes(const kv::KVConfig& cfg, int D, int chunks, int T, int nh, int nkv) {
  (void)cfg;
  const size_t N = size_t(chunks) * T, KV = size_t(nkv) * D, Q = size_t(nh) * D;
  // codes (at most a byte per element plus side data), domain K/V, rotated q, exact rotated K/V
  return 2 * N * KV * 2 + 2 * N * KV * 2 + N * Q * 2 + N * KV * 2;
}

void GpuKv::reserve(int chunks, int T, int nh, int nkv) {
  chunks_ = chunks, T_ = T, nh_ = nh, nkv_ = nkv;
  const size_t N = size_t(chunks) * T, KV = size_t(nkv) * k_.D;
  for (auto [side, codes, dom, in, out] :
       {std::tuple{&k_, &ck_, &kd_, &hk_in_, &hk_out_}, std::tuple{&v_, &cv_, &vd_, &hv_in_, &hv_out_}}) {
    if (side->kind == KvSideGpu::Exact) continue;
    dom->resize(N * KV * 2);
    if (side->kind == KvSideGpu::HostCodec) {  // the codes stay on the host
      side->host->reserve_positions(T);
      in->resize(N * KV * 2), out->resize(N * KV * 2);
      continue;
    }
    codes->resize(std::max<size_t>(1, size_t(chunks) * nkv * side->groups(T) * side->group_bytes));
  }
  if (v_.rotated() && value_window()) ve_.resize(N * KV * 2);
  if (k_.rotated()) qd_.resize(N * size_t(nh) * k_.D * 2);
}

void GpuKv::prepare(const __half* q, const __half* k, const __half* v, int chunks, cudaStream_t st, int layer) {
  if (chunks > chunks_) throw std::logic_error("GpuKv: more chunks than reserved");
  const int T = T_, nkv = nkv_;
  const bool hk = k_.kind == KvSideGpu::HostCodec, hv = v_.kind == KvSideGpu::HostCodec;
  if (k_.kind != KvSideGpu::Exact && !hk) {
    QT_CUDA_CHECK(cudaMemsetAsync(ck_.get(), 0, ck_.bytes(), st));
    kv_encode(k_, k, chunks, T, nkv, ck_.get<uint8_t>(), st);
    kv_decode(k_, ck_.get<uint8_t>(), k, chunks, T, nkv, kd_.get<__half>(), st);
    if (k_.rotated()) kv_rotate(k_, q, int64_t(chunks) * T * nh_, qd_.get<__half>(), st);
  }
  if (v_.kind != KvSideGpu::Exact && !hv) {
    QT_CUDA_CHECK(cudaMemsetAsync(cv_.get(), 0, cv_.bytes(), st));
    kv_encode(v_, v, chunks, T, nkv, cv_.get<uint8_t>(), st);
    kv_decode(v_, cv_.get<uint8_t>(), v, chunks, T, nkv, vd_.get<__half>(), st);
    if (v_.rotated() && value_window()) kv_rotate(v_, v, int64_t(chunks) * T * nkv, ve_.get<__half>(), st);
  }
  if (hk || hv) {  // after the native side's kernels: down, the CPU codecs, up
    const size_t bytes = size_t(chunks) * T * nkv * k_.D * 2;
    if (hk) QT_CUDA_CHECK(cudaMemcpyAsync(hk_in_.get(), k, bytes, cudaMemcpyDeviceToHost, st));
    if (hv) QT_CUDA_CHECK(cudaMemcpyAsync(hv_in_.get(), v, bytes, cudaMemcpyDeviceToHost, st));
    QT_CUDA_CHECK(cudaStreamSynchronize(st));
    HostCodecs::run_both(hk ? k_.host.get() : nullptr, hk_in_.get<uint16_t>(), hk_out_.get<uint16_t>(),
                         hv ? v_.host.get() : nullptr, hv_in_.get<uint16_t>(), hv_out_.get<uint16_t>(), layer, chunks,
                         T, nkv, int(k_.bound().at(T)), int(v_.bound().at(T)));
    if (hk) QT_CUDA_CHECK(cudaMemcpyAsync(kd_.get(), hk_out_.get(), bytes, cudaMemcpyHostToDevice, st));
    if (hv) QT_CUDA_CHECK(cudaMemcpyAsync(vd_.get(), hv_out_.get(), bytes, cudaMemcpyHostToDevice, st));
  }
}

void GpuKv::finish(float* out, int chunks, cudaStream_t st) {
  if (v_.rotated()) kv_unrotate(v_, out, int64_t(chunks) * T_ * nh_, st);
}

}  // namespace qt::cuda
