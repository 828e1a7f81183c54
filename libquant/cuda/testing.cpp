// Host-data wrappers of the kernels, for tests/test_cuda.cpp (each against the CPU op).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "libquant/cuda/affine.h"
#include "libquant/cuda/attention.h"
#include "libquant/cuda/backend.h"
#include "libquant/cuda/blockfp.h"
#include "libquant/cuda/buffer.h"
#include "libquant/cuda/gemm_lt.h"
#include "libquant/cuda/gemm_q8_fused.h"
#include "libquant/cuda/int8_ops.h"
#include "libquant/cuda/kv.h"
#include "libquant/cuda/model_impl.h"
#include "libquant/cuda/ops.h"

namespace qt::cuda::testing {

namespace {
template <typename T>
DeviceBuffer up(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  QT_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), b.bytes(), cudaMemcpyHostToDevice));
  return b;
}
template <typename T>
std::vector<T> down(const DeviceBuffer& b, size_t n) {
  QT_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> v(n);
  QT_CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}
// Device milliseconds per call of `once` on the default stream: one call first (plans, first
// launches), then the mean of `reps`.
template <class Once>
float ms_per_call(int reps, Once once) {
  once();
  cudaEvent_t e0, e1;
  QT_CUDA_CHECK(cudaEventCreate(&e0));
  QT_CUDA_CHECK(cudaEventCreate(&e1));
  QT_CUDA_CHECK(cudaEventRecord(e0, nullptr));
  for (int i = 0; i < reps; ++i) once();
  QT_CUDA_CHECK(cudaEventRecord(e1, nullptr));
  QT_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  QT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return ms / float(reps);
}
std::vector<float> bf16_to_host_f32(const DeviceBuffer& b, size_t n) {
  std::vector<bf16> h = down<bf16>(b, n);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}
std::vector<float> f16_to_host_f32(const DeviceBuffer& b, size_t n) {
  std::vector<__half> h = down<__half>(b, n);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __half2float(h[i]);
  return f;
}
DeviceBuffer up_bf16(const std::vector<float>& x) {
  std::vector<bf16> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = __float2bfloat16_rn(x[i]);
  return up(h);
}
DeviceBuffer up_f16(const std::vector<float>& x) {
  std::vector<__half> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = __float2half_rn(x[i]);
  return up(h);
}
}  // namespace

std::vector<float> rmsnorm(const std::vector<float>& x, const std::vector<float>& w, int rows, int dim, float eps) {
  DeviceBuffer dx = up(x), dw = up(w), dy(size_t(rows) * dim * 2);
  cuda::rmsnorm(dx.get<float>(), dw.get<float>(), dy.get<bf16>(), rows, dim, eps, rows, 0, 0, nullptr);
  return bf16_to_host_f32(dy, size_t(rows) * dim);
}

std::vector<float> rope_split(const std::vector<float>& qkv, int n, int T, int nh, int nkv, int hd,
                              const std::vector<float>& cos, const std::vector<float>& sin) {
  const size_t Q = size_t(nh) * hd, KV = size_t(nkv) * hd;
  DeviceBuffer dx = up(qkv), dc = up(cos), ds = up(sin), q(n * Q * 2), k(n * KV * 2), v(n * KV * 2);
  cuda::rope_split(dx.get<float>(), n, T, nh, nkv, hd, dc.get<float>(), ds.get<float>(), q.get<__half>(),
                   k.get<__half>(), v.get<__half>(), nullptr);
  std::vector<float> out = f16_to_host_f32(q, n * Q), kk = f16_to_host_f32(k, n * KV), vv = f16_to_host_f32(v, n * KV);
  out.insert(out.end(), kk.begin(), kk.end());
  out.insert(out.end(), vv.begin(), vv.end());
  return out;
}

std::vector<float> swiglu(const std::vector<float>& gu, int n, int F) {
  DeviceBuffer dg = up(gu), dh(size_t(n) * F * 2);
  cuda::swiglu(dg.get<float>(), n, F, dh.get<bf16>(), nullptr);
  return bf16_to_host_f32(dh, size_t(n) * F);
}

std::vector<float> gemm_bf16(const std::vector<float>& w, int out, int in, const std::vector<float>& x, int n) {
  DeviceBuffer dw = up_bf16(w), dx = up_bf16(x), dy(size_t(n) * out * 4);
  GemmLt g;
  g.run(dw.get<bf16>(), out, in, dx.get<bf16>(), n, dy.get(), CUDA_R_32F, false, nullptr);
  return down<float>(dy, size_t(n) * out);
}

std::vector<float> attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                             int B, int T, int nh, int nkv, int hd, float scale, bool fused, int window, float softcap,
                             const std::vector<float>& sinks, int tile) {
  DeviceBuffer dq = up_f16(q), dk = up_f16(k), dv = up_f16(v), out(size_t(B) * T * nh * hd * 4);
  DeviceBuffer ds = sinks.empty() ? DeviceBuffer() : up(sinks);
  if (tile != 0) {
    fused_attention(dq.get<__half>(), dk.get<__half>(), dv.get<__half>(), out.get<float>(), B, T, nh, nkv, hd, scale,
                    nullptr, window, softcap, ds.get<float>(), tile);
    return down<float>(out, size_t(B) * T * nh * hd);
  }
  Attention a(fused);
  a.bind(B, T, nh, nkv, hd, dq.get<__half>(), dk.get<__half>(), dv.get<__half>(), out.get<float>());
  a.run(B, scale, nullptr, window, softcap, ds.get<float>());
  return down<float>(out, size_t(B) * T * nh * hd);
}

float attention_ms(int B, int T, int nh, int nkv, int hd, int tile, int reps) {
  const size_t nq = size_t(B) * T * nh * hd, nk = size_t(B) * T * nkv * hd;
  std::vector<float> host(std::max(nq, nk));
  uint32_t r = 12345;
  for (float& x : host) r = r * 1664525u + 1013904223u, x = float(int(r >> 9) % 2001 - 1000) / 1000.0f;
  DeviceBuffer dq = up_f16(std::vector<float>(host.begin(), host.begin() + nq));
  const std::vector<float> kv(host.begin(), host.begin() + nk);
  DeviceBuffer dk = up_f16(kv), dv = up_f16(kv), out(nq * 4);
  Attention a(tile >= 0);
  a.bind(B, T, nh, nkv, hd, dq.get<__half>(), dk.get<__half>(), dv.get<__half>(), out.get<float>());
  const float scale = 1.0f / std::sqrt(float(hd));
  auto once = [&] {
    if (tile >= 0)
      fused_attention(dq.get<__half>(), dk.get<__half>(), dv.get<__half>(), out.get<float>(), B, T, nh, nkv, hd, scale,
                      nullptr, 0, 0, nullptr, tile);
    else
      a.run(B, scale, nullptr);
  };
  return ms_per_call(reps, once);
}

Q8 rmsnorm_q8(const std::vector<float>& x, const std::vector<float>& w, int rows, int dim, float eps) {
  DeviceBuffer dx = up(x), dw = up(w), q(size_t(rows) * dim), sx(size_t(rows) * 4);
  cuda::rmsnorm_q8(dx.get<float>(), dw.get<float>(), rows, dim, eps, q.get<int8_t>(), sx.get<float>(), nullptr);
  return {down<int8_t>(q, size_t(rows) * dim), down<float>(sx, size_t(rows))};
}

std::vector<int32_t> gemm_i8(const std::vector<int8_t>& w, int out, int in, const std::vector<int8_t>& x, int n) {
  DeviceBuffer dw = up(w), dx = up(x), dy(size_t(n) * out * 4);
  GemmLt g;
  g.run_i8(dw.get<int8_t>(), out, in, dx.get<int8_t>(), n, dy.get<int32_t>(), nullptr);
  return down<int32_t>(dy, size_t(n) * out);
}

std::vector<float> dequant(const std::vector<int32_t>& acc, int rows, int out, const std::vector<float>& sx,
                           const std::vector<float>& sw, std::vector<float> y, bool accumulate) {
  DeviceBuffer da = up(acc), ds = up(sx), dw = up(sw), dy = up(y);
  cuda::dequant(da.get<int32_t>(), rows, out, ds.get<float>(), dw.get<float>(), dy.get<float>(), accumulate, nullptr);
  return down<float>(dy, y.size());
}

Q8 swiglu_q8(const std::vector<int32_t>& acc, int rows, int F, const std::vector<float>& sx,
             const std::vector<float>& sw) {
  DeviceBuffer da = up(acc), ds = up(sx), dw = up(sw), q(size_t(rows) * F), so(size_t(rows) * 4);
  cuda::swiglu_q8(da.get<int32_t>(), rows, F, ds.get<float>(), dw.get<float>(), q.get<int8_t>(), so.get<float>(),
                  nullptr);
  return {down<int8_t>(q, size_t(rows) * F), down<float>(so, size_t(rows))};
}

Q8 residual_rmsnorm_q8(const std::vector<int32_t>& acc, const std::vector<float>& sx_acc, const std::vector<float>& sw,
                       std::vector<float>& x, const std::vector<float>& w, int rows, int dim, float eps) {
  DeviceBuffer da = up(acc), ds = up(sx_acc), dw = up(sw), dx = up(x), dn = up(w), q(size_t(rows) * dim),
               sx(size_t(rows) * 4);
  cuda::residual_rmsnorm_q8(da.get<int32_t>(), ds.get<float>(), dw.get<float>(), dx.get<float>(), dn.get<float>(), rows,
                            dim, eps, q.get<int8_t>(), sx.get<float>(), nullptr);
  x = down<float>(dx, x.size());
  return {down<int8_t>(q, size_t(rows) * dim), down<float>(sx, size_t(rows))};
}

Q8 quant_rows(const std::vector<float>& x, int rows, int dim) {
  DeviceBuffer dx = up(x), q(size_t(rows) * dim), sx(size_t(rows) * 4);
  cuda::quant_rows(dx.get<float>(), rows, dim, q.get<int8_t>(), sx.get<float>(), nullptr);
  return {down<int8_t>(q, size_t(rows) * dim), down<float>(sx, size_t(rows))};
}

std::vector<float> rope_split_q8(const std::vector<int32_t>& acc, const std::vector<float>& sx,
                                 const std::vector<float>& sw, int n, int T, int nh, int nkv, int hd,
                                 const std::vector<float>& cos, const std::vector<float>& sin) {
  const size_t Q = size_t(nh) * hd, KV = size_t(nkv) * hd;
  DeviceBuffer da = up(acc), ds = up(sx), dw = up(sw), dc = up(cos), dsn = up(sin), q(n * Q * 2), k(n * KV * 2),
               v(n * KV * 2);
  cuda::rope_split_q8(da.get<int32_t>(), ds.get<float>(), dw.get<float>(), n, T, nh, nkv, hd, dc.get<float>(),
                      dsn.get<float>(), q.get<__half>(), k.get<__half>(), v.get<__half>(), nullptr);
  std::vector<float> out = f16_to_host_f32(q, n * Q), kk = f16_to_host_f32(k, n * KV), vv = f16_to_host_f32(v, n * KV);
  out.insert(out.end(), kk.begin(), kk.end());
  out.insert(out.end(), vv.begin(), vv.end());
  return out;
}

std::vector<int32_t> gemm_i8_tuned(const std::vector<int8_t>& w, int out, int in, const std::vector<int8_t>& x, int n,
                                   int* pick) {
  DeviceBuffer dw = up(w), dx = up(x), dy(size_t(n) * out * 4);
  GemmLt g;
  const int p = g.tune(dw.get(), out, in, dx.get(), n, dy.get(), CUDA_R_32I, CUDA_R_8I, nullptr, 8, nullptr, nullptr);
  if (pick) *pick = p;
  QT_CUDA_CHECK(cudaMemset(dy.get(), 0, dy.bytes()));
  g.run_i8(dw.get<int8_t>(), out, in, dx.get<int8_t>(), n, dy.get<int32_t>(), nullptr);
  return down<int32_t>(dy, size_t(n) * out);
}

F8 rmsnorm_f8(const std::vector<float>& x, const std::vector<float>& w, int rows, int dim, float eps) {
  DeviceBuffer dx = up(x), dw = up(w), q(size_t(rows) * dim), sx(size_t(rows) * 4);
  cuda::rmsnorm_q8(dx.get<float>(), dw.get<float>(), rows, dim, eps, q.get<e4m3>(), sx.get<float>(), nullptr);
  return {down<uint8_t>(q, size_t(rows) * dim), down<float>(sx, size_t(rows))};
}

F8 quant_rows_f8(const std::vector<float>& x, int rows, int dim) {
  DeviceBuffer dx = up(x), q(size_t(rows) * dim), sx(size_t(rows) * 4);
  cuda::quant_rows(dx.get<float>(), rows, dim, q.get<e4m3>(), sx.get<float>(), nullptr);
  return {down<uint8_t>(q, size_t(rows) * dim), down<float>(sx, size_t(rows))};
}

std::vector<float> gemm_f8(const std::vector<uint8_t>& w, int out, int in, const std::vector<uint8_t>& x, int n) {
  DeviceBuffer dw = up(w), dx = up(x), dy(size_t(n) * out * 4);
  GemmLt g;
  g.run_f8(dw.get(), out, in, dx.get(), n, dy.get<float>(), nullptr);
  return down<float>(dy, size_t(n) * out);
}

F8 swiglu_f8(const std::vector<float>& acc, int rows, int F, const std::vector<float>& sx,
             const std::vector<float>& sw) {
  DeviceBuffer da = up(acc), ds = up(sx), dw = up(sw), q(size_t(rows) * F), so(size_t(rows) * 4);
  cuda::swiglu_q8(da.get<float>(), rows, F, ds.get<float>(), dw.get<float>(), q.get<e4m3>(), so.get<float>(), nullptr);
  return {down<uint8_t>(q, size_t(rows) * F), down<float>(so, size_t(rows))};
}

std::vector<float> dequant_f8(const std::vector<float>& acc, int rows, int out, const std::vector<float>& sx,
                              const std::vector<float>& sw, std::vector<float> y, bool accumulate) {
  DeviceBuffer da = up(acc), ds = up(sx), dw = up(sw), dy = up(y);
  cuda::dequant(da.get<float>(), rows, out, ds.get<float>(), dw.get<float>(), dy.get<float>(), accumulate, nullptr);
  return down<float>(dy, y.size());
}

bool q8_fused_available() { return cuda::q8_fused_available(); }

namespace {
// The fused GEMMs' hooks for either code type: C int8_t (bytes B int8_t) or e4m3 (bytes uint8_t).
template <class C, class B>
std::vector<float> swiglu_fused(const std::vector<B>& w, int F, int in, const std::vector<float>& sw,
                                const std::vector<B>& x, int n, const std::vector<float>& sx) {
  DeviceBuffer dw = up(w), dsw = up(sw), dx = up(x), dsx = up(sx), dh(size_t(n) * F * 4);
  interleave_gate_up(dw.get(), F, size_t(in), nullptr);
  interleave_gate_up(dsw.get(), F, sizeof(float), nullptr);
  cuda::gemm_q8_swiglu(dw.get<C>(), F, in, dsw.get<float>(), dx.get<C>(), n, dsx.get<float>(), dh.get<float>(),
                       nullptr);
  return down<float>(dh, size_t(n) * F);
}

template <class C, class B>
std::vector<float> rope_fused(const std::vector<B>& w, int out, int in, const std::vector<float>& sw,
                              const std::vector<B>& x, int n, const std::vector<float>& sx, int T, int hd, int rot,
                              const std::vector<float>& cos, const std::vector<float>& sin) {
  DeviceBuffer dw = up(w), dsw = up(sw), dx = up(x), dsx = up(sx),
               dcs = up(rope_cos_sin(cos.data(), sin.data(), cos.size())), dy(size_t(n) * out * 2);
  cuda::gemm_q8_rope(dw.get<C>(), out, in, dsw.get<float>(), dx.get<C>(), n, dsx.get<float>(), T, hd, rot,
                     dcs.get<float>(), dy.get<__half>(), nullptr);
  return f16_to_host_f32(dy, size_t(n) * out);
}

// Random codes of the type: every int8 code, or E4M3 bytes masked with 0x77 (non-negative, even
// exponents up to 14, every mantissa: no NaN).
void random_codes(DeviceBuffer& b, bool f8, uint32_t seed) {
  fill_random(b.get<uint32_t>(), b.bytes() / 4, seed, f8 ? 0x77777777u : 0xffffffffu, nullptr);
}

// The sums A of W · Xᵀ through cuBLASLt: int32 for int8 codes, fp32 for E4M3 ones.
template <class C, class A>
void gemm_lt_sums(GemmLt& g, const DeviceBuffer& w, int out, int in, const DeviceBuffer& x, int n, A* y) {
  if constexpr (std::is_same_v<C, int8_t>)
    g.run_i8(w.get<int8_t>(), out, in, x.get<int8_t>(), n, y, nullptr);
  else
    g.run_f8(w.get(), out, in, x.get(), n, y, nullptr);
}

template <class C, class A>
float swiglu_ms(bool fused, int F, int in, int n, int reps) {
  const int out = 2 * F;
  // random codes; scales 1/64
  DeviceBuffer w(size_t(out) * in), x(size_t(n) * in), sw(size_t(out) * 4), sx(size_t(n) * 4), y(size_t(n) * out * 4),
      q(size_t(n) * out), sq(size_t(n) * 4);
  random_codes(w, !std::is_same_v<C, int8_t>, 1);
  random_codes(x, !std::is_same_v<C, int8_t>, 2);
  const std::vector<float> s64(size_t(std::max(out, n)), 1.0f / 64);
  QT_CUDA_CHECK(cudaMemcpy(sw.get(), s64.data(), sw.bytes(), cudaMemcpyHostToDevice));
  QT_CUDA_CHECK(cudaMemcpy(sx.get(), s64.data(), sx.bytes(), cudaMemcpyHostToDevice));
  QT_CUDA_CHECK(cudaMemset(y.get(), 0, y.bytes()));
  GemmLt g;
  auto once = [&] {
    if (fused) {
      cuda::gemm_q8_swiglu(w.get<C>(), F, in, sw.get<float>(), x.get<C>(), n, sx.get<float>(), y.get<float>(), nullptr);
      cuda::quant_rows(y.get<float>(), n, F, q.get<C>(), sq.get<float>(), nullptr);
    } else {
      gemm_lt_sums<C>(g, w, out, in, x, n, y.get<A>());
      cuda::swiglu_q8(y.get<A>(), n, F, sx.get<float>(), sw.get<float>(), q.get<C>(), sq.get<float>(), nullptr);
    }
  };
  return ms_per_call(reps, once);
}

template <class C, class A>
float rope_ms(bool fused, int in, int nh, int nkv, int hd, int n, int reps) {
  const int Q = nh * hd, KV = nkv * hd, out = Q + 2 * KV, T = 512;
  DeviceBuffer w(size_t(out) * in), x(size_t(n) * in), sw(size_t(out) * 4), sx(size_t(n) * 4), y(size_t(n) * out * 4),
      q(size_t(n) * Q * 2), k(size_t(n) * KV * 2), v(size_t(n) * KV * 2), cs(size_t(T) * hd / 2 * 4),
      sn(size_t(T) * hd / 2 * 4), both(size_t(T) * hd * 4);
  random_codes(w, !std::is_same_v<C, int8_t>, 3);
  random_codes(x, !std::is_same_v<C, int8_t>, 4);
  const std::vector<float> s64(size_t(std::max({out, n, T * hd})), 1.0f / 64);
  for (DeviceBuffer* b : {&sw, &sx, &cs, &sn, &both})
    QT_CUDA_CHECK(cudaMemcpy(b->get(), s64.data(), b->bytes(), cudaMemcpyHostToDevice));
  QT_CUDA_CHECK(cudaMemset(y.get(), 0, y.bytes()));
  GemmLt g;
  auto once = [&] {
    if (fused) {
      cuda::gemm_q8_rope(w.get<C>(), out, in, sw.get<float>(), x.get<C>(), n, sx.get<float>(), T, hd, Q + KV,
                         both.get<float>(), y.get<__half>(), nullptr);
    } else {
      gemm_lt_sums<C>(g, w, out, in, x, n, y.get<A>());
      cuda::rope_split_q8(y.get<A>(), sx.get<float>(), sw.get<float>(), n, T, nh, nkv, hd, cs.get<float>(),
                          sn.get<float>(), q.get<__half>(), k.get<__half>(), v.get<__half>(), nullptr);
    }
  };
  return ms_per_call(reps, once);
}
}  // namespace

std::vector<float> gemm_q8_swiglu(const std::vector<int8_t>& w, int F, int in, const std::vector<float>& sw,
                                  const std::vector<int8_t>& x, int n, const std::vector<float>& sx) {
  return swiglu_fused<int8_t>(w, F, in, sw, x, n, sx);
}
std::vector<float> gemm_f8_swiglu(const std::vector<uint8_t>& w, int F, int in, const std::vector<float>& sw,
                                  const std::vector<uint8_t>& x, int n, const std::vector<float>& sx) {
  return swiglu_fused<e4m3>(w, F, in, sw, x, n, sx);
}

float q8_swiglu_ms(bool fused, bool f8, int F, int in, int n, int reps) {
  return f8 ? swiglu_ms<e4m3, float>(fused, F, in, n, reps) : swiglu_ms<int8_t, int32_t>(fused, F, in, n, reps);
}

std::vector<float> gemm_q8_rope(const std::vector<int8_t>& w, int out, int in, const std::vector<float>& sw,
                                const std::vector<int8_t>& x, int n, const std::vector<float>& sx, int T, int hd,
                                int rot, const std::vector<float>& cos, const std::vector<float>& sin) {
  return rope_fused<int8_t>(w, out, in, sw, x, n, sx, T, hd, rot, cos, sin);
}
std::vector<float> gemm_f8_rope(const std::vector<uint8_t>& w, int out, int in, const std::vector<float>& sw,
                                const std::vector<uint8_t>& x, int n, const std::vector<float>& sx, int T, int hd,
                                int rot, const std::vector<float>& cos, const std::vector<float>& sin) {
  return rope_fused<e4m3>(w, out, in, sw, x, n, sx, T, hd, rot, cos, sin);
}

float q8_rope_ms(bool fused, bool f8, int in, int nh, int nkv, int hd, int n, int reps) {
  return f8 ? rope_ms<e4m3, float>(fused, in, nh, nkv, hd, n, reps)
            : rope_ms<int8_t, int32_t>(fused, in, nh, nkv, hd, n, reps);
}

void force_fp8_block_decode(GpuModel& m) { m.impl().fp8_decode = true; }

bool runs_q8_rope(GpuModel& m) { return m.impl().q8_rope_now(); }

bool runs_q8_swiglu(GpuModel& m) { return m.impl().q8_cutlass; }

void force_unfused_qkv(GpuModel& m) {
  m.impl().q8_rope = false;
  m.impl().max_chunks = 0;  // the next reserve binds attention to packed q, k, v
}

void force_unfused_gate_up(GpuModel& m) {
  GpuModel::Impl& I = m.impl();
  if (!I.q8_cutlass) return;
  for (GpuModel::Impl::Layer& L : I.layers) {
    if (L.router.bytes()) continue;  // as use_q8_fused_gemms
    interleave_gate_up(L.wgu.get(), I.cfg.intermediate, size_t(I.cfg.hidden), I.stream, true);
    interleave_gate_up(L.sgu.get(), I.cfg.intermediate, sizeof(float), I.stream, true);
  }
  I.q8_cutlass = false;
}

std::vector<float> blockfp_dequant(const std::vector<const PackedTensor*>& parts) {
  const BlockFpWeight w = upload_blockfp(parts, "test");
  DeviceBuffer out(size_t(w.rows) * w.cols * 2);
  cuda::blockfp_dequant(w, out.get<bf16>(), nullptr);
  return bf16_to_host_f32(out, size_t(w.rows) * w.cols);
}

std::vector<float> round_activations(const Scheme& row, const std::vector<float>& x, int rows, int k, int io) {
  const ActRound a = act_round_of(row);
  const size_t n = size_t(rows) * k;
  DeviceBuffer dx = up(x), dy(n * (io == 0 ? 4 : 2));
  if (io == 0) {
    cuda::round_activations(a, dx.get<float>(), dy.get<float>(), rows, k, nullptr);
    return down<float>(dy, n);
  }
  DeviceBuffer g(size_t(rows) * 4);
  cuda::round_activations(a, dx.get<float>(), dy.get<bf16>(), rows, k, nullptr, io == 2 ? g.get<float>() : nullptr);
  std::vector<float> out = bf16_to_host_f32(dy, n);
  if (io == 2) {
    const std::vector<float> gs = down<float>(g, size_t(rows));
    out.insert(out.end(), gs.begin(), gs.end());
  }
  return out;
}

F8 quantize_fp8_groups(const std::vector<float>& x, int rows, int k) {
  DeviceBuffer dx = up(x), q(size_t(rows) * k), sc(size_t(rows) * (k / 128) * 4);
  cuda::quantize_fp8_groups(dx.get<float>(), q.get<uint8_t>(), sc.get<float>(), rows, k, nullptr);
  return {down<uint8_t>(q, size_t(rows) * k), down<float>(sc, size_t(rows) * (k / 128))};
}

std::vector<float> gemm_fp8_block(const std::vector<const PackedTensor*>& parts, const std::vector<float>& x, int n,
                                  const std::vector<float>& y0) {
  const BlockFpWeight w = upload_blockfp(parts, "test");
  const int in = w.cols;
  DeviceBuffer dx = up(x), q(size_t(n) * in), sc(size_t(n) * (in / 128) * 4), dy(size_t(n) * w.rows * 4);
  if (!y0.empty()) QT_CUDA_CHECK(cudaMemcpy(dy.get(), y0.data(), dy.bytes(), cudaMemcpyHostToDevice));
  cuda::quantize_fp8_groups(dx.get<float>(), q.get<uint8_t>(), sc.get<float>(), n, in, nullptr);
  GemmLt g;
  for (const BlockFpWeight::Segment& s : w.segments)
    if (!g.run_block_f8(w.codes.get<uint8_t>() + size_t(s.row0) * in, s.rows, in, s.scales.get<float>(), q.get(), n,
                        sc.get<float>(), dy.get<float>() + s.row0, w.rows, !y0.empty(), nullptr))
      return {};
  return down<float>(dy, size_t(n) * w.rows);
}

std::vector<float> affine_dequant(const std::vector<uint8_t>& codes, const std::vector<float>& scales,
                                  const std::vector<float>& biases, int rows, int cols, int bits, int group,
                                  int round_mode) {
  AffineWeight w;
  w.codes = up(codes), w.scales = up(scales), w.biases = up(biases);
  w.rows = rows, w.cols = cols, w.bits = bits, w.group = group, w.round_mode = round_mode;
  DeviceBuffer out(size_t(rows) * cols * 2);
  cuda::affine_dequant(w, out.get<bf16>(), nullptr);
  return bf16_to_host_f32(out, size_t(rows) * cols);
}

std::vector<KldToken> kld_rows(const std::vector<float>& base, const std::vector<float>& test, int rows, int V,
                               const std::vector<int32_t>& targets) {
  DeviceBuffer db = up(base), dt = up(test), dy = up(targets), out(size_t(rows) * sizeof(KldRow));
  cuda::kld_rows(db.get<float>(), dt.get<float>(), rows, V, dy.get<int32_t>(), out.get<KldRow>(), nullptr);
  const std::vector<KldRow> r = down<KldRow>(out, size_t(rows));
  std::vector<KldToken> k(r.size());
  for (size_t i = 0; i < r.size(); ++i) k[i] = {r[i].nll, r[i].nll_base, r[i].kld, r[i].same_top != 0};
  return k;
}

std::vector<double> token_nll(const std::vector<float>& logits, int rows, int V, const std::vector<int32_t>& targets) {
  DeviceBuffer dl = up(logits), dt = up(targets), dn(size_t(rows) * 8);
  cuda::token_nll(dl.get<float>(), rows, V, dt.get<int32_t>(), dn.get<double>(), nullptr);
  return down<double>(dn, size_t(rows));
}

std::vector<uint8_t> kv_encode(const kv::KVSpec& spec, bool key, const kv::KVConfig& cfg, const std::vector<float>& x,
                               int n, int D) {
  const KvSideGpu s = make_kv_side(spec, key, cfg, D);
  DeviceBuffer dx = up_f16(x), codes(std::max<size_t>(1, size_t(s.groups(n)) * s.group_bytes));
  QT_CUDA_CHECK(cudaMemset(codes.get(), 0, codes.bytes()));
  cuda::kv_encode(s, dx.get<__half>(), 1, n, 1, codes.get<uint8_t>(), nullptr);
  const int64_t enc = s.bound().at(n);
  return down<uint8_t>(codes, size_t(enc / s.G) * s.group_bytes);
}

std::vector<float> kv_decode(const kv::KVSpec& spec, bool key, const kv::KVConfig& cfg, const std::vector<float>& x,
                             int n, int D) {
  const KvSideGpu s = make_kv_side(spec, key, cfg, D);
  DeviceBuffer dx = up_f16(x), codes(std::max<size_t>(1, size_t(s.groups(n)) * s.group_bytes)), dom(size_t(n) * D * 2);
  QT_CUDA_CHECK(cudaMemset(codes.get(), 0, codes.bytes()));
  cuda::kv_encode(s, dx.get<__half>(), 1, n, 1, codes.get<uint8_t>(), nullptr);
  cuda::kv_decode(s, codes.get<uint8_t>(), dx.get<__half>(), 1, n, 1, dom.get<__half>(), nullptr);
  return f16_to_host_f32(dom, size_t(n) * D);
}

std::vector<float> kv_attention(const kv::KVConfig& cfg, const std::vector<float>& q, const std::vector<float>& k,
                                const std::vector<float>& v, int B, int T, int nh, int nkv, int D, float scale,
                                const std::vector<float>& rope_inv_freq, int layer) {
  GpuKv kvq(cfg, D, rope_inv_freq);
  kvq.reserve(B, T, nh, nkv);
  DeviceBuffer dq = up_f16(q), dk = up_f16(k), dv = up_f16(v), out(size_t(B) * T * nh * D * 4);
  const __half *qh = dq.get<__half>(), *kh = dk.get<__half>(), *vh = dv.get<__half>();
  Attention a;
  a.bind(B, T, nh, nkv, D, kvq.q_ptr(qh), kvq.k_ptr(kh), kvq.v_ptr(vh), out.get<float>(),
         kvq.key_window() ? kvq.k2_ptr(kh) : nullptr, kvq.value_window() ? kvq.v2_ptr(vh) : nullptr, qh,
         kvq.keys().bound(), kvq.values().bound());
  kvq.prepare(qh, kh, vh, B, nullptr, layer);
  a.run(B, scale, nullptr);
  kvq.finish(out.get<float>(), B, nullptr);
  return down<float>(out, size_t(B) * T * nh * D);
}

}  // namespace qt::cuda::testing
