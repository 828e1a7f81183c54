#include "tests/support.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sys/wait.h>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "libquant/model/llama.h"

namespace qt::test {

std::string source_dir() { return QT_SOURCE_DIR; }

std::string data_file(const std::string& rel) {
  if (const char* e = std::getenv("QT_DATA")) return std::string(e) + "/" + rel;
  return source_dir() + "/data/" + rel;
}

std::string model_gguf() {
  if (const char* e = std::getenv("QT_MODEL_GGUF")) return e;
  return source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string quanttool_bin() {
  if (const char* e = std::getenv("QT_BIN")) return e;
  return source_dir() + "/build/quanttool";
}

bool in_ci() {
  const char* e = std::getenv("CI");
  return e && std::string(e) == "true";
}

int run_cmd(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  if (output) *output = out;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

namespace {
// Every directory temp_dir made, removed when the test process exits: ctest runs each test in its
// own process, and a GGUF export test alone writes 0.5 GB. QT_KEEP_TMP=1 keeps them to look at.
struct TempDirs {
  std::vector<std::filesystem::path> made;
  ~TempDirs() {
    if (std::getenv("QT_KEEP_TMP")) return;
    std::error_code ec;
    for (const auto& p : made) std::filesystem::remove_all(p, ec);
  }
};
TempDirs& temp_dirs() {
  static TempDirs dirs;
  return dirs;
}
}  // namespace

std::string temp_dir(const std::string& tag) {
  std::random_device rd;
  auto p = std::filesystem::temp_directory_path() / ("qt-" + tag + "-" + std::to_string(rd()) + std::to_string(rd()));
  std::filesystem::create_directories(p);
  temp_dirs().made.push_back(p);
  return p.string();
}

std::vector<float> fp32_logits(const Checkpoint& ck, const std::vector<int32_t>& ids, int n) {
  LlamaModel m(ck, Compute::F32);
  auto cache = m.make_cache(n);
  std::vector<float> out(size_t(n) * ck.config.vocab);
  m.forward(ids.data(), n, 0, *cache, 0, n, out.data());
  return out;
}

std::vector<float> cached_logits(const Checkpoint& ck, const std::vector<int32_t>& ids, const std::string& kv,
                                 bool one_by_one) {
  LlamaModel m(ck, Compute::F32);
  const int n = int(ids.size()), V = ck.config.vocab;
  auto cache = m.make_cache(n, kv);
  std::vector<float> got(size_t(n) * V);
  if (one_by_one) {
    for (int i = 0; i < n; ++i) m.forward(&ids[size_t(i)], 1, i, *cache, 0, 1, got.data() + size_t(i) * V);
  } else {
    m.forward(ids.data(), 5, 0, *cache, 0, 5, got.data());
    m.forward(ids.data() + 5, n - 5, 5, *cache, 0, n - 5, got.data() + size_t(5) * V);
  }
  return got;
}

std::string tiny_dir(const std::string& name) { return source_dir() + "/tests/golden/logits/tiny-" + name; }

TinyGolden tiny_golden(const std::string& name) {
  const nlohmann::json g = read_json(tiny_dir(name) + "/logits.json");
  return {load_checkpoint(tiny_dir(name)), g["ids"].get<std::vector<int32_t>>(), g["logits"].get<std::vector<float>>(),
          g["ppl_chunks_ctx8"].get<double>()};
}

std::vector<float> randn(size_t count, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(count);
  for (auto& x : v) x = d(rng);
  return v;
}

void write_wide_llama(const std::string& dir, int layers, float weight_scale, int head_dim) {
  nlohmann::json cfg = read_json(source_dir() + "/tests/golden/logits/tiny-llama3/config.json");
  cfg["hidden_size"] = 128, cfg["intermediate_size"] = 256, cfg["head_dim"] = head_dim;
  cfg["num_hidden_layers"] = layers;
  const int64_t Q = 4 * head_dim, KV = 2 * head_dim;  // tiny-llama3's 4 query and 2 kv heads
  NamedTensors ts;
  uint32_t seed = 1;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale) {
    std::vector<float> v = randn(size_t(shape[0] * (shape.size() > 1 ? shape[1] : 1)), seed++, scale);
    if (shape.size() == 1)
      for (float& x : v) x = 1.0f + x;
    ts.emplace_back(name, Tensor::from_f32(std::move(v), shape));
  };
  const float w = weight_scale;
  add("model.embed_tokens.weight", {64, 128}, 1.0f);
  for (int l = 0; l < layers; ++l) {
    const std::string L = "model.layers." + std::to_string(l) + ".";
    add(L + "input_layernorm.weight", {128}, 0.1f);
    add(L + "self_attn.q_proj.weight", {Q, 128}, w);
    add(L + "self_attn.k_proj.weight", {KV, 128}, w);
    add(L + "self_attn.v_proj.weight", {KV, 128}, w);
    add(L + "self_attn.o_proj.weight", {128, Q}, w);
    add(L + "post_attention_layernorm.weight", {128}, 0.1f);
    add(L + "mlp.gate_proj.weight", {256, 128}, w);
    add(L + "mlp.up_proj.weight", {256, 128}, w);
    add(L + "mlp.down_proj.weight", {128, 256}, w);
  }
  add("model.norm.weight", {128}, 0.1f);
  add("lm_head.weight", {64, 128}, w);
  std::filesystem::create_directories(dir);
  write_safetensors(dir + "/model.safetensors", ts);
  std::ofstream(dir + "/config.json") << cfg.dump(1);
}

SchemeParams scheme_params(const char* scheme, int bits, int group, DType dt) {
  SchemeParams p;
  p.scheme = scheme;
  p.bits = bits;
  p.group_size = group;
  p.dtype = dt;
  return p;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
  return worst;
}

}  // namespace qt::test
