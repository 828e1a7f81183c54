// Streaming convert: the writer makes quantized and cast tensors a batch at a time
// while it writes each shard, so
//  - sharding changes nothing but the files: every tensor's bytes and config.json are the same at
//    any --max-shard-size, for every layout, from a GGUF and from a Hugging Face folder (the
//    layouts' bytes themselves are pinned to their libraries' goldens in test_cli_convert_quant);
//  - output dtypes follow the source unless --dtype says otherwise;
//  - the process never holds the whole output: converting a 334 MB bf16 checkpoint to a 668 MB
//    f32 folder peaks below 0.7x of it (the writer before streaming held every cast copy: > 1x);
//  - a bad source (a shard missing, truncated, or disagreeing with the index) or a disk that fills
//    (ulimit -f) gives one line, exit 2, no output folder, and the source untouched.
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "tests/support.h"

namespace qt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string tiny_hf() { return test::source_dir() + "/tests/golden/logits/tiny-llama3"; }
std::string tiny_gguf() { return test::source_dir() + "/tests/golden/hf_export/tiny_llama3.gguf"; }

int qt_run(const std::string& args, std::string* out) { return test::run_cmd(test::quanttool_bin() + " " + args, out); }

using test::read_json;

std::string bytes_of(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// name -> the tensor's dtype, shape and bytes, over every shard of a folder.
std::map<std::string, std::string> tensor_bytes(const std::string& dir) {
  SafetensorsDir st = load_safetensors_dir(dir);
  std::map<std::string, std::string> m;
  for (auto& [name, t] : st.tensors) {
    std::string shape;
    for (int64_t d : t.shape) shape += std::to_string(d) + ",";
    m[name] = std::string(dtype_name(t.dtype)) + "[" + shape + "]" +
              std::string(reinterpret_cast<const char*>(t.data), t.nbytes);
  }
  return m;
}

size_t count_files(const std::string& dir, const std::string& ext) {
  size_t n = 0;
  for (auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ext;
  return n;
}

TEST(StreamingConvert, ShardingChangesOnlyTheFiles) {
  const std::string tmp = test::temp_dir("stream-shards");
  struct Row {
    std::string flags;
  };
  const Row rows[] = {{""},
                      {"--dtype bf16"},
                      {"--scheme affine --bits 4 --group-size 32"},
                      {"--scheme affine --bits 3 --group-size 32 --dtype bf16"},
                      {"--scheme int8 --format compressed-tensors --group-size 0"},
                      {"--scheme nf4 --group-size 64"},
                      {"--scheme int4 --format native --group-size 0"}};
  int k = 0;
  for (const std::string& in : {tiny_hf(), tiny_gguf()}) {
    for (const Row& r : rows) {
      SCOPED_TRACE(in + " " + r.flags);
      const std::string one = tmp + "/one" + std::to_string(k), many = tmp + "/many" + std::to_string(k);
      ++k;
      std::string log;
      ASSERT_EQ(qt_run("convert --in " + in + " --out " + one + " " + r.flags, &log), 0) << log;
      ASSERT_EQ(qt_run("convert --in " + in + " --out " + many + " --max-shard-size 3KiB " + r.flags, &log), 0) << log;
      EXPECT_EQ(count_files(one, ".safetensors"), 1u);
      EXPECT_GT(count_files(many, ".safetensors"), 2u);
      auto a = tensor_bytes(one), b = tensor_bytes(many);
      EXPECT_EQ(a.size(), b.size());
      for (auto& [name, v] : a) EXPECT_TRUE(b.count(name) && b[name] == v) << name;
      EXPECT_EQ(read_json(one + "/config.json"), read_json(many + "/config.json"));
    }
  }
  fs::remove_all(tmp);
}

// The float dtype of every stored tensor that is not codes, by name.
std::map<std::string, DType> float_dtypes(const std::string& dir) {
  SafetensorsDir st = load_safetensors_dir(dir);
  std::map<std::string, DType> m;
  for (auto& [name, t] : st.tensors)
    if (is_float(t.dtype)) m[name] = t.dtype;
  return m;
}

TEST(StreamingConvert, OutputDtypeFollowsTheSource) {
  const std::string tmp = test::temp_dir("stream-dtype");
  std::string log;
  // A bf16 and an f32 copy of the tiny model, then each converted without --dtype.
  ASSERT_EQ(qt_run("convert --in " + tiny_gguf() + " --out " + tmp + "/bf16 --dtype bf16", &log), 0) << log;
  ASSERT_EQ(qt_run("convert --in " + tiny_gguf() + " --out " + tmp + "/f32 --dtype f32", &log), 0) << log;
  for (auto& [src, want, torch] :
       {std::tuple{"bf16", DType::BF16, "bfloat16"}, std::tuple{"f32", DType::F32, "float32"}}) {
    SCOPED_TRACE(src);
    for (const std::string flags : {"", "--scheme affine --bits 4 --group-size 32", "--scheme int8"}) {
      const std::string out = tmp + "/" + src + "-out";
      ASSERT_EQ(qt_run("convert --in " + tmp + "/" + src + " --out " + out + " --force " + flags, &log), 0) << log;
      auto dts = float_dtypes(out);
      EXPECT_FALSE(dts.empty());
      for (auto& [name, d] : dts) EXPECT_EQ(dtype_name(d), std::string(dtype_name(want))) << flags << " " << name;
      EXPECT_EQ(read_json(out + "/config.json")["torch_dtype"], torch) << flags;
    }
  }
  // --dtype still overrides: bf16 in, f32 out.
  ASSERT_EQ(qt_run("convert --in " + tmp + "/bf16 --out " + tmp + "/up --dtype f32", &log), 0) << log;
  for (auto& [name, d] : float_dtypes(tmp + "/up")) EXPECT_EQ(d, DType::F32) << name;
  fs::remove_all(tmp);
}

// A llama-shaped bf16 checkpoint of `layers` layers, hidden 1024, written with our own writer in
// shards of 64 MB; returns its size in bytes.
uint64_t write_checkpoint(const std::string& dir, int layers) {
  json cfg = read_json(tiny_hf() + "/config.json");
  cfg["hidden_size"] = 1024;
  cfg["intermediate_size"] = 4096;
  cfg["num_attention_heads"] = 16;
  cfg["num_key_value_heads"] = 4;
  cfg["head_dim"] = 64;
  cfg["num_hidden_layers"] = layers;
  cfg["vocab_size"] = 32000;
  cfg["tie_word_embeddings"] = true;
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  std::mt19937 rng(7);
  auto make = [&](std::vector<int64_t> shape, bool norm) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<uint8_t> b(size_t(n) * 2);
    uint16_t* v = reinterpret_cast<uint16_t*>(b.data());
    for (int64_t i = 0; i < n; ++i) {
      // A bf16 of magnitude 2^-9 .. 2^-5 (random sign, exponent 118..121, mantissa); norms 1.0.
      const uint32_t r = rng();
      v[i] = norm ? 0x3f80 : uint16_t((r & 0x8000) | ((118 + ((r >> 8) & 3)) << 7) | (r & 0x7f));
    }
    return Tensor::owned_bytes(DType::BF16, std::move(shape), std::move(b));
  };
  NamedTensors ts;
  ts.emplace_back("model.embed_tokens.weight", make({32000, 1024}, false));
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ts.emplace_back(p + "input_layernorm.weight", make({1024}, true));
    ts.emplace_back(p + "post_attention_layernorm.weight", make({1024}, true));
    ts.emplace_back(p + "self_attn.q_proj.weight", make({1024, 1024}, false));
    ts.emplace_back(p + "self_attn.k_proj.weight", make({256, 1024}, false));
    ts.emplace_back(p + "self_attn.v_proj.weight", make({256, 1024}, false));
    ts.emplace_back(p + "self_attn.o_proj.weight", make({1024, 1024}, false));
    ts.emplace_back(p + "mlp.gate_proj.weight", make({4096, 1024}, false));
    ts.emplace_back(p + "mlp.up_proj.weight", make({4096, 1024}, false));
    ts.emplace_back(p + "mlp.down_proj.weight", make({1024, 4096}, false));
  }
  ts.emplace_back("model.norm.weight", make({1024}, true));
  uint64_t total = 0;
  for (auto& [n, t] : ts) total += t.nbytes;
  write_safetensors_sharded(dir, ts, {{"format", "pt"}}, 64'000'000);
  return total;
}

TEST(StreamingConvert, PeakMemoryIsAFractionOfTheOutput) {
  const std::string tmp = test::temp_dir("stream-mem");
  const uint64_t src_bytes = write_checkpoint(tmp + "/src", 8);  // 167 M parameters, 334 MB
  const uint64_t out_bytes = 2 * src_bytes;                      // as f32
  std::string log;
  ASSERT_EQ(
      qt_run("convert --in " + tmp + "/src --out " + tmp + "/f32 --dtype f32 --max-shard-size 100MB --threads 2", &log),
      0)
      << log;
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);  // the largest child's peak (this test's only convert)
  const double peak = double(ru.ru_maxrss) * 1024;
  std::printf("bf16 %.0f MB -> f32 %.0f MB: peak RSS %.0f MB\n", src_bytes / 1e6, out_bytes / 1e6, peak / 1e6);
  EXPECT_LT(peak, 0.7 * double(out_bytes));  // before streaming: above 1.0x (every cast copy held)
  // And the output is the source, widened.
  SafetensorsDir a = load_safetensors_dir(tmp + "/src"), b = load_safetensors_dir(tmp + "/f32");
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const char* name : {"model.embed_tokens.weight", "model.layers.7.mlp.down_proj.weight"}) {
    const Tensor &s = a.tensors.at(name), &d = b.tensors.at(name);
    ASSERT_EQ(d.dtype, DType::F32);
    for (int64_t i = 0; i < s.numel(); i += 9973)
      ASSERT_EQ(d.as<float>()[i], bf16_to_f32(s.as<uint16_t>()[i])) << name << i;
  }
  fs::remove_all(tmp);
}

int count_lines_starting(const std::string& text, const std::string& prefix) {
  int n = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    n += text.compare(at, prefix.size(), prefix) == 0;
    at = end + 1;
  }
  return n;
}

TEST(StreamingConvert, BadSourceAndFullDiskExit2LeavingNothing) {
  const std::string tmp = test::temp_dir("stream-bad");
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + tiny_hf() + " --out " + tmp + "/good --max-shard-size 3KiB", &log), 0) << log;
  // Shards 00001..N; broken copies of the good folder.
  std::vector<std::string> shards;
  for (auto& e : fs::directory_iterator(tmp + "/good"))
    if (e.path().extension() == ".safetensors") shards.push_back(e.path().filename().string());
  std::sort(shards.begin(), shards.end());
  ASSERT_GT(shards.size(), 3u);
  auto copy = [&](const std::string& name) {
    fs::copy(tmp + "/good", tmp + "/" + name, fs::copy_options::recursive);
    return tmp + "/" + name;
  };
  const std::string missing = copy("missing"), trunc = copy("trunc"), mismatch = copy("mismatch");
  fs::remove(missing + "/" + shards[1]);
  {
    const std::string b = bytes_of(trunc + "/" + shards[2]);
    std::ofstream(trunc + "/" + shards[2], std::ios::binary) << b.substr(0, b.size() - 64);
  }
  {
    json idx = read_json(mismatch + "/model.safetensors.index.json");
    auto& wm = idx["weight_map"];
    // Point one tensor at another shard than the one holding it.
    const std::string name = wm.begin().key(), holder = wm.begin().value();
    wm[name] = holder == shards[0] ? shards[1] : shards[0];
    std::ofstream(mismatch + "/model.safetensors.index.json") << idx.dump(2);
  }
  fs::create_directories(tmp + "/outs");
  auto snapshot = [&](const std::string& dir) {
    std::map<std::string, std::string> m;
    for (auto& e : fs::directory_iterator(dir)) m[e.path().filename().string()] = bytes_of(e.path().string());
    return m;
  };
  struct Case {
    std::string src, flags, needle, prefix;
  };
  const Case cases[] = {
      {missing, "", missing + "/" + shards[1] + ": ", ""},
      {trunc, "", trunc + "/" + shards[2] + ": ", ""},
      {mismatch, "", mismatch + "/", ""},
      // A disk that fills: the file-size limit (ulimit -f, KiB) stops the writer mid-shard.
      {tmp + "/good", "--dtype f32", "File too large", "ulimit -f 16; "},
      {tmp + "/good", "--scheme affine --bits 4 --group-size 32 --max-shard-size 2KiB", "File too large",
       "ulimit -f 4; "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.src + " " + c.flags);
    const auto before = snapshot(c.src);
    std::string out;
    const int rc = test::run_cmd("bash -c '" + c.prefix + test::quanttool_bin() + " convert --in " + c.src + " --out " +
                                     tmp + "/outs/x " + c.flags + "'",
                                 &out);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_EQ(count_lines_starting(out, "error: "), 1) << out;
    EXPECT_NE(out.find(c.needle), std::string::npos) << out;
    EXPECT_TRUE(fs::is_empty(tmp + "/outs")) << "left behind in " << tmp << "/outs";
    EXPECT_TRUE(snapshot(c.src) == before) << "source changed";
  }
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace qt
