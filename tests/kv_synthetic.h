// The synthetic two-layer, two-kv-head model the calibrated-KV tests share (test_kv_vq.cpp,
// test_kv_commvq.cpp): its keys and values, samples for calibration, and a decode-mode cache on it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "calib/kv_codebook.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/spec.h"

namespace qt::kv_synthetic {

using namespace qt::kv;

constexpr int kD = 16, kLayers = 2, kHeads = 2;

// Keys with a few large channels and a mean (as post-RoPE keys have), values with decaying
// variance; every head different.
inline void draw(std::mt19937& g, bool key, int layer, int head, float* x) {
  std::normal_distribution<float> nd;
  const float common = nd(g);  // a shared factor: correlated channels, which PCA finds
  for (int i = 0; i < kD; ++i) {
    float sd = key ? (i == 3 || i == 11 ? 6.0f : 0.5f + 0.1f * i) : 2.0f / float(1 + i);
    sd *= 1.0f + 0.3f * float(head) + 0.1f * float(layer);
    const float mean = key ? (i == 3 ? 4.0f : 0.2f * float(head)) : 0.0f;
    x[i] = mean + sd * nd(g) + (key ? 1.5f : 0.8f) * common * float((i % 3) == 0);
  }
}

constexpr float kScale = 0.25f;  // the test caches' attention scale

// A decode-mode cache without a window over the synthetic layers (4 query heads on kHeads kv heads,
// scale kScale), keys and values by the given methods with tables from dir.
inline std::unique_ptr<KVCache> decode_cache(const char* keys, const char* values, const std::string& dir, int max_ctx,
                                             std::vector<float> rope_inv_freq = {}) {
  KVShape sh;
  sh.n_layers = kLayers, sh.n_heads = 4, sh.n_kv_heads = kHeads, sh.head_dim = kD, sh.max_ctx = max_ctx;
  sh.scale = kScale;
  sh.rope_inv_freq = std::move(rope_inv_freq);
  KVConfig cfg = uniform_kv_config(kLayers, parse_kv_spec(keys, "t"), parse_kv_spec(values, "t"));
  cfg.residual = 0;
  cfg.mode = KVMode::Decode;
  cfg.artifacts = dir;
  cfg.seed = 42;
  return make_kv_cache(cfg, sh);
}

// One layer's n positions of keys and values (draw, per kv head) and queries 0.3·N(0, 1) for 4 heads.
inline void draw_layer(std::mt19937& g, int layer, int n, std::vector<float>& k, std::vector<float>& v,
                       std::vector<float>& q) {
  const int HD = kHeads * kD;
  k.resize(size_t(n) * HD), v.resize(size_t(n) * HD), q.resize(size_t(n) * 4 * kD);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < kHeads; ++h) {
      draw(g, true, layer, h, k.data() + size_t(t) * HD + h * kD);
      draw(g, false, layer, h, v.data() + size_t(t) * HD + h * kD);
    }
  std::normal_distribution<float> nd;
  for (float& e : q) e = 0.3f * nd(g);
}

inline calib::KvSamples synthetic(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  calib::KvSamples s;
  s.layers = kLayers, s.heads = kHeads, s.dim = kD, s.n = n;
  s.k.resize(kLayers * kHeads), s.v.resize(kLayers * kHeads);
  for (int l = 0; l < kLayers; ++l)
    for (int h = 0; h < kHeads; ++h)
      for (int key = 0; key < 2; ++key) {
        auto& x = (key ? s.k : s.v)[size_t(l) * kHeads + h];
        x.resize(size_t(n) * kD);
        for (int64_t t = 0; t < n; ++t) draw(g, key, l, h, x.data() + t * kD);
      }
  return s;
}

// Reference attention in double for one query head at position t: softmax over positions 0..t
// of kScale * (qq . keys[j]), weighting value(j, i), the value of position j at dimension i.
template <class Value>
std::vector<double> ref_attend(const float* qq, const std::vector<std::vector<double>>& keys, int t, Value value) {
  std::vector<double> s(size_t(t) + 1);
  double m = -1e300, z = 0;
  for (int j = 0; j <= t; ++j) {
    double d = 0;
    for (int i = 0; i < kD; ++i) d += double(qq[i]) * keys[size_t(j)][size_t(i)];
    s[size_t(j)] = d * kScale;
    m = std::max(m, s[size_t(j)]);
  }
  std::vector<double> o(kD, 0.0);
  for (int j = 0; j <= t; ++j) {
    const double p = std::exp(s[size_t(j)] - m);
    z += p;
    for (int i = 0; i < kD; ++i) o[size_t(i)] += p * value(j, i);
  }
  for (double& e : o) e /= z;
  return o;
}

}  // namespace qt::kv_synthetic
