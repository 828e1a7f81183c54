// ggml_quantize_token (ggml_token_i8.h): the token's rounding to int8, llama.cpp's quantize_row_q8_0.
#include "libquant/kernels/ggml_token_i8.h"

#include <immintrin.h>

#include <cmath>

#include "libquant/cpu_features.h"

namespace qt::kernels {
namespace {

#define QT_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))

QT_VNNI void quantize_vnni(const float* x, int64_t k, GgmlTokenI8* t) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    t->d[size_t(b)] = d;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t->q.data() + 32 * b), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t->q.data() + 32 * b + 16), _mm512_cvtsepi32_epi8(q1));
    t->sum16[size_t(2 * b)] = _mm512_reduce_add_epi32(q0);
    t->sum16[size_t(2 * b + 1)] = _mm512_reduce_add_epi32(q1);
    t->sum32[size_t(b)] = float(t->sum16[size_t(2 * b)] + t->sum16[size_t(2 * b + 1)]);
  }
}

}  // namespace

bool ggml_i8_supported() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_vnni && f.f16c && f.fma;
}

void ggml_quantize_token(const float* x, int64_t k, GgmlTokenI8* t) {
  t->q.resize(size_t(k));
  t->d.resize(size_t(k / 32));
  t->sum16.resize(size_t(k / 16));
  t->sum32.resize(size_t(k / 32));
  if (ggml_i8_supported()) return quantize_vnni(x, k, t);
  for (int64_t b = 0; b < k / 32; ++b) {  // the same rule in scalar form (nearest, ties to even)
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[32 * b + j]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    t->d[size_t(b)] = amax / 127.0f;
    for (int h = 0; h < 2; ++h) {
      int32_t s = 0;
      for (int j = 16 * h; j < 16 * h + 16; ++j) {
        const int8_t q = int8_t(std::nearbyint(x[32 * b + j] * id));
        t->q[size_t(32 * b + j)] = q;
        s += q;
      }
      t->sum16[size_t(2 * b + h)] = s;
    }
    t->sum32[size_t(b)] = float(t->sum16[size_t(2 * b)] + t->sum16[size_t(2 * b + 1)]);
  }
}

}  // namespace qt::kernels
