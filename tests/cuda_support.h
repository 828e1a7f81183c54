// Helpers of the GPU tests (tests/test_cuda*.cpp, one executable: test_cuda): the skip-or-fail
// guard, random data, the tiny llama and its CPU logits.
//
// GPU tests skip without a device (CI is CPU-only); on the device machine run them with
// QT_REQUIRE_GPU=1, which turns a missing device into a failure:
//   QT_REQUIRE_GPU=1 build-cuda/test_cuda
#pragma once
#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include <gtest/gtest.h>

#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "libquant/cuda/backend.h"
#include "libquant/eval/perplexity.h"
#include "libquant/kernels/bf16.h"
#include "libquant/kv/cache.h"
#include "libquant/kv/codec.h"
#include "libquant/model/llama.h"
#include "libquant/math/ops.h"
#include "libquant/linear/packed_linear.h"
#include "libquant/schemes/scheme.h"
#include "tests/support.h"

namespace qt::cudatest {

#define QT_REQUIRE_GPU()                                                                                \
  do {                                                                                                  \
    if (cuda::device_count() == 0) {                                                                    \
      if (std::getenv("QT_REQUIRE_GPU")) FAIL() << "QT_REQUIRE_GPU is set but there is no CUDA device"; \
      GTEST_SKIP() << "no CUDA device: the GPU tests run on the device machine";                        \
    }                                                                                                   \
  } while (0)

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) { return test::randn(n, seed, scale); }
inline uint32_t bits_of(float v) {  // a float's bits, for bit-for-bit comparisons
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
inline float bf16v(float x) { return kernels::bf16_round_value(x); }
inline float f16v(float x) { return f16_to_f32(f32_to_f16(x)); }

inline std::string tiny_dir() { return test::source_dir() + "/tests/golden/logits/tiny-llama3"; }

// The tiny llama converted with `flags` into a fresh folder named after `tag`: the folder's path,
// or "" (and a test failure with convert's output) when convert fails.
inline std::string convert_tiny(const std::string& tag, const std::string& flags) {
  const std::string dir = test::temp_dir(tag) + "/m";
  std::string out;
  if (test::run_cmd(test::quanttool_bin() + " convert --in " + tiny_dir() + " --out " + dir + " " + flags, &out) != 0) {
    ADD_FAILURE() << "convert " << flags << ": " << out;
    return "";
  }
  return dir;
}

inline std::vector<int32_t> random_ids(int n, uint32_t seed) {
  std::vector<int32_t> ids;
  std::mt19937 g(seed);
  for (int i = 0; i < n; ++i) ids.push_back(int32_t(g() % 64));
  return ids;
}
// The logits of every position of `ids` from model m with a fresh `kv` cache.
inline std::vector<float> model_logits(LlamaModel& m, const std::vector<int32_t>& ids, const std::string& kv) {
  const int n = int(ids.size());
  auto cache = m.make_cache(n, kv);
  std::vector<float> out(size_t(n) * m.config().vocab);
  m.forward(ids.data(), n, 0, *cache, 0, n, out.data());
  return out;
}
inline std::vector<float> cpu_logits(const Checkpoint& ck, Compute compute, const std::string& kv,
                                     const std::vector<int32_t>& ids) {
  LlamaModel m(ck, compute);
  return model_logits(m, ids, kv);
}
inline double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i] - b[i]) * double(a[i] - b[i]);
  return std::sqrt(s / double(a.size()));
}

// A random llama 128 wide, two layers (test::write_wide_llama), written into `dir`.
inline void write_wide_llama(const std::string& dir) { test::write_wide_llama(dir, 2, 0.1f); }

}  // namespace qt::cudatest
