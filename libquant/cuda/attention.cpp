#include "libquant/cuda/attention.h"

#include <stdexcept>
#include <vector>

#include "libquant/cuda/ops.h"

namespace qt::cuda {

Attention::Attention(bool fused) : fused_(fused) { QT_CUBLAS_CHECK(cublasCreate(&h_)); }
Attention::~Attention() {
  if (h_) cublasDestroy(h_);
}

void Attention::bind(int max_chunks, int T, int nh, int nkv, int hd, const __half* q, const __half* k, const __half* v,
                     float* out, const __half* k2, const __half* v2, const __half* q2, KvBound kb, KvBound vb, int ld) {
  max_chunks_ = max_chunks, T_ = T, nh_ = nh, nkv_ = nkv, hd_ = hd;
  k2_ = k2 != nullptr, v2_ = v2 != nullptr;
  kb_ = kb, vb_ = vb;
  fused_now_ = runs_fused(fused_, hd, k2_, v2_);
  if (ld && !fused_now_) throw std::logic_error("Attention::bind: strided q, k, v on the fused path only");
  q_ = q, k_ = k, v_ = v, out_ = out, ld_ = ld;
  if (fused_now_) {  // no scratch: release what a materialised binding held
    for (DeviceBuffer* b : {&S_, &P_, &S2_, &P2_, &ptrs_, &bptrs_}) b->resize(0);
    band_ = nbf_ = tail_ = 0;
    return;
  }
  band_ = band(T, k2_, v2_, kb, vb);
  nbf_ = band_ ? T / band_ : 0, tail_ = band_ ? T % band_ : 0;
  if (!q2) q2 = q;
  const size_t heads = size_t(max_chunks) * nh, tt = size_t(T) * T, t2 = band_ ? size_t(T) * 2 * band_ : tt;
  S_.resize(heads * tt * sizeof(float));
  P_.resize(heads * tt * sizeof(__half));
  S2_.resize(k2_ ? heads * t2 * sizeof(float) : 0);
  P2_.resize(v2_ ? heads * t2 * sizeof(__half) : 0);
  // Per (chunk c, head h): the pointer arrays of the two batched GEMMs, in this order:
  // QKᵀ: A = K, B = Q, C = S;  PV: A = V, B = P, C = out;  then K2, S2, V2, P2 (decode windows).
  std::vector<const void*> p(11 * heads);
  const int Q = nh * hd, KV = nkv * hd, group = nh / nkv;
  for (int c = 0; c < max_chunks; ++c)
    for (int h = 0; h < nh; ++h) {
      const size_t i = size_t(c) * nh + h;
      const size_t row0 = size_t(c) * T;
      const int g = h / group;
      p[0 * heads + i] = k + row0 * KV + size_t(g) * hd;
      p[1 * heads + i] = q + row0 * Q + size_t(h) * hd;
      p[2 * heads + i] = S_.get<float>() + i * tt;
      p[3 * heads + i] = v + row0 * KV + size_t(g) * hd;
      p[4 * heads + i] = P_.get<__half>() + i * tt;
      p[5 * heads + i] = out + row0 * Q + size_t(h) * hd;
      p[6 * heads + i] = k2 ? k2 + row0 * KV + size_t(g) * hd : nullptr;
      p[7 * heads + i] = k2 ? S2_.get<float>() + i * tt : nullptr;
      p[8 * heads + i] = v2 ? v2 + row0 * KV + size_t(g) * hd : nullptr;
      p[9 * heads + i] = v2 ? P2_.get<__half>() + i * tt : nullptr;
      p[10 * heads + i] = q2 + row0 * Q + size_t(h) * hd;
    }
  ptrs_.resize(p.size() * sizeof(void*));
  QT_CUDA_CHECK(cudaMemcpy(ptrs_.get(), p.data(), p.size() * sizeof(void*), cudaMemcpyHostToDevice));
  if (!band_) return;
  // Band: per (chunk, head, query block b of W rows) the keys [ks, ks + 2W), ks = band_start(b):
  // S2 = K2[ks..]ᵀ Q2[bW..] (2W × rows, ld 2W) and out[bW..] += V2[ks..] · P2 (2W × rows).
  // Arrays: K2, Q2, S2, V2, P2, out — the whole blocks (index (c·nh + h)·nbf + b), then the tail.
  const int W = band_, w2 = 2 * W;
  const size_t nfull = heads * size_t(nbf_), nall = nfull + (tail_ ? heads : 0);
  std::vector<const void*> b(6 * nall, nullptr);
  auto put = [&](size_t base, size_t n, size_t idx, size_t c, int h, int blk) {
    const size_t row0 = c * T, i = c * nh + h;
    const int g = h / group, ks = band_start(blk, W, T), q0 = blk * W;
    b[base + 0 * n + idx] = k2 ? k2 + (row0 + ks) * KV + size_t(g) * hd : nullptr;
    b[base + 1 * n + idx] = q2 + (row0 + q0) * Q + size_t(h) * hd;
    b[base + 2 * n + idx] = k2 ? S2_.get<float>() + (i * T + q0) * w2 : nullptr;
    b[base + 3 * n + idx] = v2 ? v2 + (row0 + ks) * KV + size_t(g) * hd : nullptr;
    b[base + 4 * n + idx] = v2 ? P2_.get<__half>() + (i * T + q0) * w2 : nullptr;
    b[base + 5 * n + idx] = out + (row0 + q0) * Q + size_t(h) * hd;
  };
  for (int c = 0; c < max_chunks; ++c)
    for (int h = 0; h < nh; ++h) {
      for (int blk = 0; blk < nbf_; ++blk) put(0, nfull, (size_t(c) * nh + h) * nbf_ + blk, c, h, blk);
      if (tail_) put(6 * nfull, heads, size_t(c) * nh + h, c, h, nbf_);
    }
  bptrs_.resize(b.size() * sizeof(void*));
  QT_CUDA_CHECK(cudaMemcpy(bptrs_.get(), b.data(), b.size() * sizeof(void*), cudaMemcpyHostToDevice));
}

void Attention::run(int chunks, float scale, cudaStream_t s, int window, float softcap, const float* sinks) {
  const KvBound kb = kb_, vb = vb_;
  if (chunks <= 0) return;
  if (chunks > max_chunks_) throw std::logic_error("Attention::run: more chunks than bound");
  if (fused_now_) {
    fused_attention(q_, k_, v_, out_, chunks, T_, nh_, nkv_, hd_, scale, s, window, softcap, sinks, 0, ld_);
    return;
  }
  QT_CUBLAS_CHECK(cublasSetStream(h_, s));
  const size_t heads = size_t(max_chunks_) * nh_;
  const int batch = chunks * nh_;
  void* const* P = ptrs_.get<void*>();
  const float one = 1.0f, zero = 0.0f;
  const int Q = nh_ * hd_, KV = nkv_ * hd_, T = T_;
  // S (T_k × T_q, column-major, ld T) = Kᵀ (T_k × hd) · Q (hd × T_q): row i of S is query i.
  QT_CUBLAS_CHECK(cublasGemmBatchedEx(h_, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd_, &one, P + 0 * heads, CUDA_R_16F, KV,
                                      P + 1 * heads, CUDA_R_16F, Q, &zero, P + 2 * heads, CUDA_R_32F, T, batch,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  // The exact window's GEMMs (decode mode): whole T × T, or the band's blocks.
  const int W = band_, w2 = 2 * W;
  const size_t nfull = heads * size_t(nbf_);
  void* const* B = bptrs_.get<void*>();
  // (pointer arrays, rows of the query block, batch count) of the band's whole blocks and its tail
  struct Part {
    void* const* p;
    size_t n;
    int rows, batch;
  };
  std::vector<Part> parts;
  if (W) {
    parts.push_back({B, nfull, W, chunks * nh_ * nbf_});
    if (tail_) parts.push_back({B + 6 * nfull, heads, tail_, batch});
  }
  if (k2_) {  // S2 = K2ᵀ Q2: the exact keys' scores
    if (!W)
      QT_CUBLAS_CHECK(cublasGemmBatchedEx(h_, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd_, &one, P + 6 * heads, CUDA_R_16F, KV,
                                          P + 10 * heads, CUDA_R_16F, Q, &zero, P + 7 * heads, CUDA_R_32F, T, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    for (const Part& pt : parts)
      QT_CUBLAS_CHECK(cublasGemmBatchedEx(h_, CUBLAS_OP_T, CUBLAS_OP_N, w2, pt.rows, hd_, &one, pt.p + 0 * pt.n,
                                          CUDA_R_16F, KV, pt.p + 1 * pt.n, CUDA_R_16F, Q, &zero, pt.p + 2 * pt.n,
                                          CUDA_R_32F, w2, pt.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if ((k2_ || v2_) && (window > 0 || softcap > 0 || sinks))
    throw std::logic_error("Attention::run: sliding windows, soft-caps and sinks through a quantized cache's windows");
  if (k2_ || v2_)
    window_softmax(S_.get<float>(), k2_ ? S2_.get<float>() : nullptr, int64_t(batch) * T, T, scale, kb, vb,
                   P_.get<__half>(), v2_ ? P2_.get<__half>() : nullptr, W, s);
  else
    causal_softmax(S_.get<float>(), int64_t(batch) * T, T, scale, P_.get<__half>(), s, window, softcap, sinks, nh_);
  // out (hd × T_q, ld Q) = V (hd × T_k, ld KV) · P (T_k × T_q, ld T).
  QT_CUBLAS_CHECK(cublasGemmBatchedEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, hd_, T, T, &one, P + 3 * heads, CUDA_R_16F, KV,
                                      P + 4 * heads, CUDA_R_16F, T, &zero, P + 5 * heads, CUDA_R_32F, Q, batch,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (v2_) {  // out += V2 · P2: the exact value window
    if (!W)
      QT_CUBLAS_CHECK(cublasGemmBatchedEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, hd_, T, T, &one, P + 8 * heads, CUDA_R_16F, KV,
                                          P + 9 * heads, CUDA_R_16F, T, &one, P + 5 * heads, CUDA_R_32F, Q, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    for (const Part& pt : parts)
      QT_CUBLAS_CHECK(cublasGemmBatchedEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, hd_, pt.rows, w2, &one, pt.p + 3 * pt.n,
                                          CUDA_R_16F, KV, pt.p + 4 * pt.n, CUDA_R_16F, w2, &one, pt.p + 5 * pt.n,
                                          CUDA_R_32F, Q, pt.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace qt::cuda
