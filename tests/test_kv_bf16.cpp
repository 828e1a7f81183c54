// The bf16 KV cache (`--kv bf16`; libquant/kv/attention_bf16.h): attention through the cache at
// every kernel level against the double-precision reference of the same bf16 operands
// (kv::attention_bf16_ref), the decode step's shared attention bit for bit the forking call, and
// the refusals (mixed with other methods, odd head_dim).
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "formats/error.h"
#include "libquant/cpu_features.h"
#include "libquant/kernels/bf16.h"
#include "libquant/kv/attention_bf16.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/spec.h"
#include "libquant/math/ops.h"
#include "tests/support.h"

namespace qt {
namespace {

struct Case {
  int n_heads, n_kv_heads, head_dim, first_pos, n_q, pieces;
};

// The cache's block of one layer, rebuilt from K/V rows in the bf16 layout the reference reads
// (cap even: values are stored in pairs of positions).
std::vector<uint16_t> bf16_blocks(const std::vector<float>& k, const std::vector<float>& v, int total, int H, int D,
                                  int64_t cap) {
  std::vector<uint16_t> b(size_t(H) * 2 * cap * D);
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < total; ++j)
      for (int d = 0; d < D; ++d) {
        const size_t src = size_t(j) * H * D + size_t(h) * D + d;
        b[h * 2 * cap * D + kv::bf16_k_index(cap, j, d)] = kernels::round_bf16(k[src]);
        b[h * 2 * cap * D + kv::bf16_v_index(cap, D, j, d)] = kernels::round_bf16(v[src]);
      }
  return b;
}

// Rounding P to bf16 moves each weight by at most 2^-9 of itself, so an output (a weighted mean
// of values) by at most 2^-8 of the largest |value|: the widened path (P unrounded) stays within
// that of the reference; the AVX512-BF16 tiles round P as the reference does and differ only in
// fp32 summation order (and the rare weight that rounds the other way because of it).
TEST(KvBf16, CacheMatchesReferenceAtEveryLevel) {
  const Case cases[] = {{9, 3, 64, 0, 37, 1}, {9, 3, 64, 0, 130, 3}, {4, 4, 32, 10, 1, 1}, {8, 2, 128, 50, 13, 2},
                        {2, 1, 80, 0, 70, 4}, {3, 3, 6, 0, 9, 1},    {2, 2, 24, 3, 29, 2}};
  const KernelLevel saved = kernel_level();
  for (const Case& tc : cases) {
    SCOPED_TRACE(::testing::Message() << tc.n_heads << "/" << tc.n_kv_heads << " heads, d " << tc.head_dim << ", pos "
                                      << tc.first_pos << " + " << tc.n_q);
    const int total = tc.first_pos + tc.n_q, D = tc.head_dim;
    const int64_t qw = int64_t(tc.n_heads) * D, kw = int64_t(tc.n_kv_heads) * D;
    const auto k = test::randn(total * kw, 21), v = test::randn(total * kw, 22), q = test::randn(tc.n_q * qw, 23, 2.0f);
    float vmax = 0;
    for (float x : v) vmax = std::max(vmax, std::abs(x));
    KVShape s;
    s.n_layers = 1, s.n_heads = tc.n_heads, s.n_kv_heads = tc.n_kv_heads, s.head_dim = D, s.max_ctx = total + 5;
    s.scale = 1.0f / std::sqrt(float(D));
    const int64_t cap = (total + 1) / 2 * 2;  // whole pairs of positions
    const auto blocks = bf16_blocks(k, v, total, tc.n_kv_heads, D, cap);
    std::vector<float> want(size_t(tc.n_q * qw));
    kv::attention_bf16_ref(q.data(), qw, tc.n_q, tc.first_pos, tc.n_heads, tc.n_kv_heads, D, s.scale,
                           kv::Bf16Layout{blocks.data(), cap, 2 * cap * D}, want.data(), qw);
    for (KernelLevel lvl : available_kernel_levels()) {
      set_kernel_level(lvl);
      SCOPED_TRACE(kernel_level_name(lvl));
      auto cache = make_kv_cache("bf16", s);
      EXPECT_EQ(cache->name(), "bf16");
      EXPECT_EQ(cache->bytes_per_token(), 2.0 * 2 * kw);
      for (int round = 0; round < 2; ++round) {  // a second sequence must not see the first
        cache->clear();
        int done = 0;
        for (int p = 0; p < tc.pieces; ++p) {
          const int n = (p + 1 == tc.pieces) ? total - done : total / tc.pieces;
          cache->append(0, (round ? k : v).data() + done * kw, v.data() + done * kw, n, done);
          done += n;
        }
      }
      std::vector<float> got(want.size(), -1.0f);
      cache->attend(0, q.data(), tc.n_q, tc.first_pos, got.data());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
      EXPECT_LT(worst, std::ldexp(vmax, -8));
      const bool tiles =
          lvl == KernelLevel::AVX512 && cpu_features().avx512_bf16 && !cpu_features().amx_bf16 && D % 16 == 0;
      if (tiles) {
        EXPECT_LT(worst, 1e-4 * vmax);  // same roundings, another fp32 order
      }
    }
  }
  set_kernel_level(saved);
}

// The decode step's team calls attend on every thread under a ShareAttention, each computing its
// slice of the heads: together the same bits as one forking call.
TEST(KvBf16, SharedAttentionEqualsForkingCall) {
  const int H = 8, KV = 2, D = 64, total = 77;
  KVShape s;
  s.n_layers = 1, s.n_heads = H, s.n_kv_heads = KV, s.head_dim = D, s.max_ctx = 128, s.scale = 0.125f;
  const auto k = test::randn(size_t(total) * KV * D, 31), v = test::randn(size_t(total) * KV * D, 32);
  const auto q = test::randn(size_t(H) * D, 33);
  auto cache = make_kv_cache("bf16", s);
  cache->append(0, k.data(), v.data(), total, 0);
  std::vector<float> whole(size_t(H) * D), parts(size_t(H) * D, -1.0f);
  cache->attend(0, q.data(), 1, total - 1, whole.data());
  for (int t = 0; t < 3; ++t) {
    ops::ShareAttention share(t, 3);
    cache->attend(0, q.data(), 1, total - 1, parts.data());
  }
  EXPECT_EQ(parts, whole);
}

TEST(KvBf16, Refusals) {
  KVShape s;
  s.n_layers = 2, s.n_heads = 4, s.n_kv_heads = 2, s.head_dim = 64, s.max_ctx = 32, s.scale = 0.125f;
  kv::KVConfig mixed =
      kv::uniform_kv_config(2, kv::parse_kv_spec("bf16", "--kv-k"), kv::parse_kv_spec("f16", "--kv-v"));
  EXPECT_THROW(make_kv_cache(mixed, s), UserError);
  KVShape odd = s;
  odd.head_dim = 7;
  EXPECT_THROW(make_kv_cache("bf16", odd), UserError);
}

}  // namespace
}  // namespace qt
