// The legacy GGUF types' candidate lanes (formats/ggml_legacy_lanes.h) against the scalar loop they
// replace, restated here: each candidate's error and refit sums bit for bit, for counts that fill
// and do not fill the lanes, so the --imatrix search picks the same blocks on every machine.
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "formats/ggml_legacy_lanes.h"
#include "formats/tensor.h"

namespace qt {
namespace {

int round_away(float v) {
  v = std::clamp(v, -1e9f, 1e9f);
  const int i = int(v);
  const float r = v - float(i);
  return i + (r >= 0.5f) - (r <= -0.5f);
}
float f16(float v) { return f16_to_f32(f32_to_f16(v)); }

TEST(GgmlLanes, CandidateScoresEqualTheScalarLoop) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.01f, 3.0f);
  float x[32], w[32];
  for (int j = 0; j < 32; ++j) x[j] = nd(rng), w[j] = ud(rng);
  x[5] = 0.5f * 0.0625f;  // a half step under some candidate: the tie rule matters
  for (int count : {1, 8, 13, 21}) {
    std::vector<float> d(count), m(count);
    for (int c = 0; c < count; ++c) d[c] = 0.0625f * (1.0f + 0.37f * float(c)), m[c] = -2.0f + 0.05f * float(c);
    std::vector<ggml::SymScore> s(count);
    std::vector<ggml::AffScore> a(count);
    ggml::sym_scores(x, w, d.data(), count, -16, 15, s.data());
    ggml::aff_scores(x, w, d.data(), m.data(), count, 31, a.data());
    for (int c = 0; c < count; ++c) {
      const float d16 = f16(d[c]), m16 = f16(m[c]), id = 1.0f / d16;
      double err = 0, sxq = 0, sqq = 0, aerr = 0, sw = 0, swq = 0, swqq = 0, swx = 0, swxq = 0;
      for (int j = 0; j < 32; ++j) {
        const int q = std::clamp(round_away(x[j] * id), -16, 15);
        const float v = d16 * float(q);
        err += double(w[j]) * (double(x[j]) - v) * (double(x[j]) - v);
        sxq += double(w[j]) * x[j] * q, sqq += double(w[j]) * q * q;
        const int u = std::clamp(round_away((x[j] - m16) * id), 0, 31);
        const float va = d16 * float(u) + m16;
        const double wj = w[j];
        aerr += wj * (double(x[j]) - va) * (double(x[j]) - va);
        sw += wj, swq += wj * u, swqq += wj * u * u, swx += wj * x[j], swxq += wj * x[j] * u;
      }
      EXPECT_EQ(s[c].err, err) << count << " " << c;
      EXPECT_EQ(s[c].sxq, sxq);
      EXPECT_EQ(s[c].sqq, sqq);
      EXPECT_EQ(a[c].err, aerr);
      EXPECT_EQ(a[c].sw, sw);
      EXPECT_EQ(a[c].swq, swq);
      EXPECT_EQ(a[c].swqq, swqq);
      EXPECT_EQ(a[c].swx, swx);
      EXPECT_EQ(a[c].swxq, swxq);
    }
  }
}

}  // namespace
}  // namespace qt
