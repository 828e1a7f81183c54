// End to end through the quanttool binary: `convert` output checked against transformers' GGUF
// loader (crc32 of every tensor's f32 bytes; bf16/f16 against torch's round-to-nearest-even
// casts of the same values), `inspect` against gguf-py's reading of the file, and bad input
// (exit code 2, one line naming the file or flag, nothing written).
// Golden: tests/golden/make_hf_export_golden.py.
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "tests/support.h"

namespace qt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string golden_dir() { return test::source_dir() + "/tests/golden/hf_export/"; }

using test::read_json;

int qt_run(const std::string& args, std::string* out) { return test::run_cmd(test::quanttool_bin() + " " + args, out); }

uint32_t crc_bytes(const Tensor& t) {
  return uint32_t(crc32(0, reinterpret_cast<const Bytef*>(t.data), uInt(t.nbytes)));
}

// Every tensor of the exported weights has the golden's shape and crc (of bytes in `dtype`).
void expect_export(const std::string& dir, const json& want, const std::string& crc_key, DType dtype) {
  SafetensorsFile st = SafetensorsFile::open(dir + "/model.safetensors");
  EXPECT_EQ(st.metadata().at("format"), "pt");
  ASSERT_EQ(st.tensors().size(), want.size());
  for (auto& [name, w] : want.items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(st.has(name));
    const Tensor& t = st.get(name);
    EXPECT_EQ(t.dtype, dtype);
    EXPECT_EQ(t.shape, w["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(crc_bytes(t), w[crc_key].get<uint32_t>());
  }
}

// Nothing but `keep` in `dir`: no temporary folders left behind.
void expect_only(const std::string& dir, const std::set<std::string>& keep) {
  for (auto& e : fs::directory_iterator(dir))
    EXPECT_TRUE(keep.count(e.path().filename().string())) << "left behind: " << e.path();
}

TEST(CliConvert, RealModelF32EqualsTransformers) {
  QT_REQUIRE_FILE(test::model_gguf());
  json g = read_json(golden_dir() + "smollm2_q4_1.json");
  std::string tmp = test::temp_dir("conv-f32"), out = tmp + "/smollm2";
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + test::model_gguf() + " --out " + out + " --dtype f32", &log), 0) << log;
  std::printf("%s", log.c_str());
  expect_only(tmp, {"smollm2"});
  for (const char* f :
       {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  expect_export(out, g["tensors"], "crc32_f32", DType::F32);

  // config.json: what transformers' loader reads from the GGUF, in the form transformers expects.
  json c = read_json(out + "/config.json");
  const json& e = g["config"];
  EXPECT_EQ(c["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["torch_dtype"], "float32");
  for (const char* k :
       {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "vocab_size", "max_position_embeddings", "tie_word_embeddings", "bos_token_id", "eos_token_id"})
    EXPECT_EQ(c[k], e[k]) << k;
  EXPECT_EQ(c["rope_theta"].get<double>(), e["rope_theta"].get<double>());
  EXPECT_EQ(c["rms_norm_eps"].get<double>(), 1e-5);
  EXPECT_TRUE(c["rope_scaling"].is_null());
  EXPECT_EQ(c["hidden_act"], "silu");
  json tc = read_json(out + "/tokenizer_config.json");
  EXPECT_TRUE(tc.is_object());
  json tj = read_json(out + "/tokenizer.json");
  EXPECT_EQ(tj["model"]["vocab"].size(), 49152u);
  fs::remove_all(tmp);
}

// bf16 / f16 exports are the f32 values rounded to nearest even: torch's casts are the reference.
TEST(CliConvert, RealModelHalfPrecisionEqualsTorchRounding) {
  QT_REQUIRE_FILE(test::model_gguf());
  json g = read_json(golden_dir() + "smollm2_q4_1.json");
  for (auto [dt, key, dtype, torch_name] : {std::tuple{"bf16", "crc32_bf16", DType::BF16, "bfloat16"},
                                            std::tuple{"f16", "crc32_f16", DType::F16, "float16"}}) {
    SCOPED_TRACE(dt);
    std::string tmp = test::temp_dir("conv-half"), out = tmp + "/m";
    std::string log;
    ASSERT_EQ(qt_run("convert --in " + test::model_gguf() + " --out " + out + " --dtype " + dt, &log), 0) << log;
    expect_export(out, g["tensors"], key, dtype);
    EXPECT_EQ(read_json(out + "/config.json")["torch_dtype"], torch_name);
    fs::remove_all(tmp);
  }
}

TEST(CliInspect, RealModelAsGgufPyReadsIt) {
  QT_REQUIRE_FILE(test::model_gguf());
  json g = read_json(golden_dir() + "smollm2_q4_1.json");
  std::string tmp = test::temp_dir("inspect");
  std::string out;
  ASSERT_EQ(qt_run("inspect " + test::model_gguf() + " --json " + tmp + "/i.json", &out), 0) << out;
  std::printf("%s", out.substr(0, 1200).c_str());
  json j = read_json(tmp + "/i.json");
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["parameters"], 134515008);
  EXPECT_EQ(j["tokenizer"]["vocab_size"], 49152);
  EXPECT_EQ(j["tokenizer"]["add_bos"], false);
  EXPECT_EQ(j["tensors"].size(), 272u);
  // Per ggml type: tensor count, bytes and elements as gguf-py reads the file.
  EXPECT_EQ(j["by_type"], g["gguf_by_type"]);
  uint64_t bytes = 0, elems = 0;
  for (auto& [t, v] : g["gguf_by_type"].items())
    bytes += v["bytes"].get<uint64_t>(), elems += v["elements"].get<uint64_t>();
  EXPECT_EQ(j["totals"]["bytes"], bytes);
  EXPECT_NEAR(j["totals"]["bits_per_weight"].get<double>(), 8.0 * bytes / elems, 1e-9);
  for (const char* needle :
       {"llama (LlamaForCausalLM)", "Q4_1", "Q8_0", "134,515,008", "token_embd.weight", "[49152, 576]", "30,081,024"})
    EXPECT_NE(out.find(needle), std::string::npos) << needle;
  fs::remove_all(tmp);
}

// Tiny models without the real one: llama3 scaling and a separate lm_head survive GGUF -> HF ->
// HF; sharding; inspect on a folder.
TEST(CliConvert, TinyGgufToHfAndBack) {
  json g = read_json(golden_dir() + "tiny.json");
  const json& want = g["tiny_llama3"]["tensors"];
  std::string tmp = test::temp_dir("conv-tiny"), a = tmp + "/a", b = tmp + "/b", s = tmp + "/s";
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + golden_dir() + "tiny_llama3.gguf --out " + a + " --dtype f32", &log), 0) << log;
  expect_export(a, want, "crc32_f32", DType::F32);
  EXPECT_FALSE(fs::exists(a + "/tokenizer.json"));  // the tiny file has no vocabulary
  json c = read_json(a + "/config.json");
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["rope_scaling"], json({{"rope_type", "llama3"},
                                     {"factor", 8.0},
                                     {"low_freq_factor", 1.0},
                                     {"high_freq_factor", 4.0},
                                     {"original_max_position_embeddings", 8192}}));
  // An HF folder as input gives the same folder again.
  ASSERT_EQ(qt_run("convert --in " + a + " --out " + b + " --dtype f32", &log), 0) << log;
  expect_export(b, want, "crc32_f32", DType::F32);
  EXPECT_EQ(read_json(b + "/config.json"), c);
  // Shards above --max-shard-size, with an index transformers reads.
  ASSERT_EQ(qt_run("convert --in " + a + " --out " + s + " --max-shard-size 16KiB", &log), 0) << log;
  json idx = read_json(s + "/model.safetensors.index.json");
  EXPECT_EQ(idx["weight_map"].size(), want.size());
  EXPECT_GT(std::distance(fs::directory_iterator(s), fs::directory_iterator()), 4);
  ASSERT_EQ(qt_run("inspect " + s + " --json " + tmp + "/i.json", &log), 0) << log;
  json i = read_json(tmp + "/i.json");
  EXPECT_EQ(i["tensors"].size(), want.size());
  EXPECT_EQ(i["by_type"]["F32"]["tensors"], want.size());
  EXPECT_EQ(i["tokenizer"], nullptr);
  fs::remove_all(tmp);
}

// Bad input: exit code 2, exactly one line that names the file or flag and the problem, and
// nothing written next to --out.
TEST(CliConvert, BadInput) {
  std::string tmp = test::temp_dir("conv-bad");
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  auto write = [](const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; };
  const std::string good = golden_dir() + "tiny_qwen2.gguf";
  const std::string gguf = bytes(good);
  fs::create_directories(tmp + "/in/noconfig");
  fs::create_directories(tmp + "/in/arch");
  fs::create_directories(tmp + "/in/badjson");
  write(tmp + "/in/arch/config.json",
        R"({"model_type": "gpt_neox", "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 1, "vocab_size": 8})");
  write(tmp + "/in/badjson/config.json", R"({"model_type": "llama", "hidden_size": 8,,})");
  write(tmp + "/in/trunc.gguf", gguf.substr(0, gguf.size() - 100));
  write(tmp + "/in/header.gguf", gguf.substr(0, 40));
  write(tmp + "/in/magic.gguf", "GGML" + gguf.substr(4));
  fs::create_directories(tmp + "/out");
  fs::create_directories(tmp + "/taken");
  write(tmp + "/taken/keep.txt", "mine");

  struct Case {
    std::string args, needle;
  };
  const std::string in = tmp + "/in/", out = " --out " + tmp + "/out/x";
  const Case cases[] = {
      {"convert --in " + in + "noconfig" + out, in + "noconfig: no config.json"},
      {"convert --in " + in + "arch" + out,
       in + "arch/config.json: unsupported architecture 'gpt_neox' (supported: llama, mistral, qwen2, qwen3, "},
      {"convert --in " + in + "badjson" + out, in + "badjson/config.json: invalid JSON"},
      {"convert --in " + in + "trunc.gguf" + out, in + "trunc.gguf: "},
      {"convert --in " + in + "header.gguf" + out, in + "header.gguf: "},
      {"convert --in " + in + "magic.gguf" + out, in + "magic.gguf: not a GGUF file"},
      {"convert --in " + in + "missing.gguf" + out, in + "missing.gguf: "},
      {"convert --in " + good + out + " --dtype f8", "--dtype"},
      {"convert --in " + good + out + " --format onnx", "unknown output layout 'onnx'"},
      {"convert --in " + good + out + " --max-shard-size lots", "--max-shard-size: 'lots'"},
      {"convert --in " + good + " --out " + tmp + "/taken", tmp + "/taken: already exists"},
      {"inspect " + in + "noconfig", in + "noconfig: no config.json"},
      {"inspect " + in + "trunc.gguf", in + "trunc.gguf: "},
      {"inspect " + in + "magic.gguf", in + "magic.gguf: not a GGUF file"},
      {"inspect " + in + "arch", "unsupported architecture 'gpt_neox'"},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.args);
    std::string log;
    EXPECT_EQ(qt_run(c.args, &log), 2) << log;
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
    EXPECT_NE(log.find(c.needle), std::string::npos) << log;
    expect_only(tmp + "/out", {});
    expect_only(tmp, {"in", "out", "taken"});
  }
  EXPECT_EQ(bytes(tmp + "/taken/keep.txt"), "mine");
  // --force replaces it, and only once the new folder is complete.
  std::string log;
  ASSERT_EQ(qt_run("convert --in " + good + " --out " + tmp + "/taken --force", &log), 0) << log;
  EXPECT_FALSE(fs::exists(tmp + "/taken/keep.txt"));
  EXPECT_TRUE(fs::exists(tmp + "/taken/model.safetensors"));
  expect_only(tmp, {"in", "out", "taken"});
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace qt
