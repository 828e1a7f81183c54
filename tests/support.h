// Helpers shared by the tests: where things are, and the CI rule that a missing model or text
// is a failure (CI=true), never a silent skip.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json_fwd.hpp>

#include "formats/checkpoint.h"
#include "libquant/parallel.h"
#include "libquant/schemes/scheme.h"

namespace qt::test {

std::string source_dir();                       // the repository root
std::string data_file(const std::string& rel);  // data/<rel> ($QT_DATA/<rel> if set)
std::string model_gguf();                       // models/SmolLM2-135M-Instruct.Q4_1.gguf
std::string quanttool_bin();                    // path of the built binary
bool in_ci();
// Run a shell command, capture stdout+stderr; returns the exit code.
int run_cmd(const std::string& cmd, std::string* output);
std::string temp_dir(const std::string& tag);  // fresh empty directory, removed at exit
// The fp32 logits [n, vocab] of the first n of `ids` through a float model of `ck` (fold tests).
std::vector<float> fp32_logits(const Checkpoint& ck, const std::vector<int32_t>& ids, int n);
// The logits of ids in two pieces through an `kv` cache (positions 5.. attend to the cached first
// five), or one token at a time.
std::vector<float> cached_logits(const Checkpoint& ck, const std::vector<int32_t>& ids, const std::string& kv,
                                 bool one_by_one);
// tests/golden/logits/tiny-<name>: the folder, and logits.json's ids, transformers' logits and
// mean NLL of eval-ppl's chunks at ctx 8.
struct TinyGolden {
  Checkpoint ck;
  std::vector<int32_t> ids;
  std::vector<float> logits;
  double ppl_chunks_ctx8 = 0;
};
std::string tiny_dir(const std::string& name);
TinyGolden tiny_golden(const std::string& name);
// `count` draws of N(0, scale^2) from mt19937(seed): synthetic weights and activations.
std::vector<float> randn(size_t count, uint32_t seed, float scale = 1.0f);
// A random llama 128 wide (the widths fp8_block's 128-blocks and activation groups divide): tiny-llama3's
// config with hidden 128, MLP 256, 4 query and 2 kv heads of head_dim and `layers` layers; projections
// and the head N(0, weight_scale²), norms 1 + N(0, 0.1²), the embedding N(0, 1); model.safetensors and
// config.json in dir.
void write_wide_llama(const std::string& dir, int layers, float weight_scale, int head_dim = 32);
// The parameters of `scheme` at `bits`, group size `group` (0: per channel), unquantized dtype `dt`.
SchemeParams scheme_params(const char* scheme, int bits, int group, DType dt = DType::F32);
// A JSON file (a failed expectation when it cannot be opened).
nlohmann::json read_json(const std::string& path);
// max |a_i - b_i| (a failed expectation when the sizes differ).
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

// One OpenMP thread while in scope, for tests that run the model one token per forward (KV decode
// mode): the kernels give the same bits at any thread count, and with two threads each of a
// token's hundreds of small parallel regions ends in a barrier wait — on a loaded 2-core machine
// those waits spin for minutes.
struct OneThread {
  int saved = num_threads();
  OneThread() { set_threads(1); }
  ~OneThread() { set_threads(saved); }
};

}  // namespace qt::test

// Use at the top of a test that needs an input file: fails under CI, skips elsewhere.
#define QT_REQUIRE_FILE(path)                                                    \
  do {                                                                           \
    if (!std::filesystem::exists(path)) {                                        \
      if (qt::test::in_ci()) FAIL() << "missing required input: " << (path);     \
      GTEST_SKIP() << "missing input (run scripts/fetch-models.sh): " << (path); \
    }                                                                            \
  } while (0)
