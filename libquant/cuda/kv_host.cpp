// The host-codec side of the GPU cache (kv_host.h): the CPU codecs on pinned host copies of the
// chunk's K/V, per (chunk, kv head), the reconstruction in head space.
#include "libquant/cuda/kv_host.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "formats/error.h"
#include "formats/tensor.h"
#include "libquant/cpu_features.h"
#include "libquant/kv/artifacts.h"
#include "libquant/kv/attend_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace qt::cuda {

namespace {
// Rows of f16 bits to floats and back (round to nearest even): F16C where the CPU has it (the
// same values as formats' scalar f16_to_f32 / f32_to_f16, which cost a tenth of the host work).
#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void widen_f16c(const uint16_t* x, int n, float* y) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = f16_to_f32(x[i]);
}
__attribute__((target("avx,f16c"))) void narrow_f16c(const float* x, int n, uint16_t* y) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) y[i] = f32_to_f16(x[i]);
}
#endif
void widen(const uint16_t* x, int n, float* y) {
#if defined(__x86_64__)
  if (cpu_features().f16c) return widen_f16c(x, n, y);
#endif
  for (int i = 0; i < n; ++i) y[i] = f16_to_f32(x[i]);
}
void narrow(const float* x, int n, uint16_t* y) {
#if defined(__x86_64__)
  if (cpu_features().f16c) return narrow_f16c(x, n, y);
#endif
  for (int i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}
}  // namespace

HostCodecs::HostCodecs(const kv::KVSpec& spec, bool key, const kv::KVConfig& cfg, int head_dim, int n_layers,
                       std::vector<float> rope_inv_freq)
    : spec_(spec), key_(key), n_layers_(n_layers), inv_freq_(std::move(rope_inv_freq)) {
  ctx_.head_dim = head_dim;
  ctx_.seed = cfg.seed;
  if (!cfg.artifacts.empty()) ctx_.artifacts = kv::Artifacts::load(cfg.artifacts, head_dim, cfg.seed);
  build(1);
}

void HostCodecs::build(int n_pos) {
  n_pos_ = n_pos;
  kv::KVContext ctx = ctx_;
  if (int(inv_freq_.size()) * 2 == ctx.head_dim) ctx.rope = kv::RopeAngles::make(inv_freq_, n_pos);
  // Calibrated methods read their tables per layer (ctx.layer); the others are the same codec on
  // every layer, built once.
  const int n = kv::kv_method_calibrated(spec_.method) ? n_layers_ : 1;
  codecs_.clear();
  mats_.clear();
  for (int l = 0; l < n; ++l) {
    ctx.layer = l;
    codecs_.push_back(kv::make_codec(spec_, key_ ? kv::Side::Key : kv::Side::Value, ctx));
  }
}

void HostCodecs::reserve_positions(int T) {
  if (!inv_freq_.empty() && T > n_pos_) build(T);
}

const std::vector<float>& HostCodecs::matrix(const kv::Codec& c) const {
  auto it = mats_.find(&c);
  if (it == mats_.end()) throw std::logic_error("HostCodecs: matrix not prepared");
  return it->second;
}

namespace {
// Mt (domain_dim × D, project_t's layout) with head = Mt · dom; empty when it is the identity.
std::vector<float> head_matrix(const kv::Codec& c, bool key) {
  const int D = c.head_dim(), dd = c.domain_dim();
  std::vector<float> Mt(size_t(dd) * D, 0.0f);
  if (key) {  // k̂[ch] = ⟨query_to_domain(e_ch), dom⟩: Mt[i][ch] = query_to_domain(e_ch)[i]
    std::vector<float> I(size_t(D) * D, 0.0f), Q(size_t(D) * dd);
    for (int ch = 0; ch < D; ++ch) I[size_t(ch) * D + ch] = 1.0f;
    c.queries_to_domain(I.data(), D, Q.data());
    for (int ch = 0; ch < D; ++ch)
      for (int i = 0; i < dd; ++i) Mt[size_t(i) * D + ch] = Q[size_t(ch) * dd + i];
  } else {  // v̂ = domain_to_head(dom): Mt[i] = domain_to_head(e_i)
    std::vector<float> e(dd, 0.0f);
    for (int i = 0; i < dd; ++i) {
      e[i] = 1.0f;
      c.domain_to_head(e.data(), Mt.data() + size_t(i) * D);
      e[i] = 0.0f;
    }
  }
  if (dd != D) return Mt;
  for (int i = 0; i < dd; ++i)
    for (int ch = 0; ch < D; ++ch)
      if (Mt[size_t(i) * D + ch] != (i == ch ? 1.0f : 0.0f)) return Mt;
  return {};
}
}  // namespace

void HostCodecs::run_one(int layer, const uint16_t* x, int c, int h, int T, int nkv, int enc, uint16_t* y) const {
  const int D = ctx_.head_dim;
  const size_t KV = size_t(nkv) * D;
  auto at = [&](int t) { return (size_t(c) * T + t) * KV + size_t(h) * D; };
  for (int t = enc; t < T; ++t) std::memcpy(y + at(t), x + at(t), sizeof(uint16_t) * D);
  if (enc <= 0) return;
  const kv::Codec& codec = codecs_[codecs_.size() == 1 ? 0 : size_t(layer)]->for_head(h);
  const int G = codec.token_group(), dd = codec.domain_dim();
  const size_t gb = codec.group_bytes();
  thread_local std::vector<float> X, DOM, Y;
  thread_local std::vector<uint8_t> CODES;
  X.resize(size_t(enc) * D);
  for (int t = 0; t < enc; ++t) widen(x + at(t), D, X.data() + size_t(t) * D);
  // Encode as quant_cache.cpp's encode_upto: per-token codecs in runs of up to 64 tokens (codecs
  // may share work across a run; the bytes are those of token-by-token encoding), token groups one
  // at a time; positions from 0 in every chunk (the CPU clears its cache per chunk).
  CODES.assign(size_t(enc / G) * gb, 0);
  if (G == 1) {
    for (int a = 0; a < enc; a += 64)
      codec.encode_tokens_at(X.data() + size_t(a) * D, std::min(64, enc - a), a, CODES.data() + size_t(a) * gb);
  } else {
    for (int g = 0; g < enc / G; ++g)
      codec.encode_at(X.data() + size_t(g) * G * D, D, int64_t(g) * G, CODES.data() + size_t(g) * gb);
  }
  DOM.resize(size_t(enc) * dd);
  codec.decode(CODES.data(), 0, enc, DOM.data());
  const std::vector<float>& Mt = matrix(codec);
  const float* head = DOM.data();
  if (!Mt.empty()) {
    Y.resize(size_t(enc) * D);
    kv::attend_kernels().project_rows(DOM.data(), dd, enc, Mt.data(), dd, D, Y.data(), D);
    head = Y.data();
  }
  for (int t = 0; t < enc; ++t) narrow(head + size_t(t) * D, D, y + at(t));
}

void HostCodecs::run(int layer, const uint16_t* x, int B, int T, int nkv, int enc, uint16_t* y) const {
  run_both(this, x, y, nullptr, nullptr, nullptr, layer, B, T, nkv, enc, 0);
}

void HostCodecs::run_both(const HostCodecs* a, const uint16_t* xa, uint16_t* ya, const HostCodecs* b,
                          const uint16_t* xb, uint16_t* yb, int layer, int B, int T, int nkv, int enc_a, int enc_b) {
  // The matrices of this layer's codecs, once, before the parallel loop.
  for (const HostCodecs* s : {a, b}) {
    if (!s) continue;
    if (s->n_pos_ < T && !s->inv_freq_.empty()) throw std::logic_error("HostCodecs: positions not reserved");
    const kv::Codec& lc = *s->codecs_[s->codecs_.size() == 1 ? 0 : size_t(layer)];
    for (int h = 0; h < nkv; ++h) {
      const kv::Codec* c = nullptr;
      try {
        c = &lc.for_head(h);
      } catch (const std::out_of_range&) {
        user_error("{} {}: the artifacts hold tables for fewer kv heads than the model's {}",
                   s->key_ ? "--kv-k" : "--kv-v", s->spec_.text(), nkv);
      }
      if (!s->mats_.count(c)) s->mats_[c] = head_matrix(*c, s->key_);
    }
  }
  const int per = B * nkv, tasks = (a ? per : 0) + (b ? per : 0);
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1)
  for (int i = 0; i < tasks; ++i) {
    const bool first = a && i < per;
    const int j = first || !a ? i : i - per;
    const HostCodecs* s = first ? a : b;
    s->run_one(layer, first ? xa : xb, j / nkv, j % nkv, T, nkv, first ? enc_a : enc_b, first ? ya : yb);
  }
}

}  // namespace qt::cuda
