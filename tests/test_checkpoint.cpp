// load_checkpoint against transformers' GGUF loader: every tensor's float32 bytes (crc32) equal
// what transformers produces for the same file (tiny GGUFs of llama with llama3 scaling, qwen2,
// qwen3, and the real SmolLM2 Q4_1 model). Golden: tests/golden/make_hf_export_golden.py.
// Also the HF-folder reader (written by our writer, read back to the same golden) and bad input.
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/layouts/hf.h"
#include "formats/mapped_file.h"
#include "formats/safetensors.h"
#include "tests/support.h"

namespace qt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string golden_dir() { return test::source_dir() + "/tests/golden/hf_export/"; }

json golden(const std::string& name) {
  std::ifstream f(golden_dir() + name);
  EXPECT_TRUE(f.good()) << name;
  return json::parse(f);
}

uint32_t crc_f32(const Tensor& t) {
  std::vector<float> v = to_f32(t);
  return uint32_t(crc32(0, reinterpret_cast<const Bytef*>(v.data()), uInt(v.size() * 4)));
}

// Tensors, shapes and bytes equal the golden (transformers) exactly; the samples say where when
// not.
void expect_tensors(const Checkpoint& ck, const json& want) {
  ASSERT_EQ(ck.tensors.size(), want.size());
  for (auto& [name, w] : want.items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(ck.has(name));
    const Tensor& t = ck.get(name);
    EXPECT_EQ(t.shape, w["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(crc_f32(t), w["crc32_f32"].get<uint32_t>());
    std::vector<float> v = to_f32(t);
    for (auto& s : w["samples"]) EXPECT_EQ(v.at(s[0].get<size_t>()), s[1].get<float>()) << "at " << s[0];
  }
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

template <typename F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Checkpoint, TensorNames) {
  // docs/spec/gguf.md §Tensor names.
  const std::pair<const char*, const char*> rows[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
      {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
      {"blk.12.attn_q.weight", "model.layers.12.self_attn.q_proj.weight"},
      {"blk.3.attn_k.weight", "model.layers.3.self_attn.k_proj.weight"},
      {"blk.3.attn_v.weight", "model.layers.3.self_attn.v_proj.weight"},
      {"blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight"},
      {"blk.29.ffn_norm.weight", "model.layers.29.post_attention_layernorm.weight"},
      {"blk.1.ffn_gate.weight", "model.layers.1.mlp.gate_proj.weight"},
      {"blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight"},
      {"blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"},
      {"blk.4.attn_q.bias", "model.layers.4.self_attn.q_proj.bias"},
      {"blk.4.attn_k.bias", "model.layers.4.self_attn.k_proj.bias"},
      {"blk.4.attn_v.bias", "model.layers.4.self_attn.v_proj.bias"},
      {"blk.5.attn_q_norm.weight", "model.layers.5.self_attn.q_norm.weight"},
      {"blk.5.attn_k_norm.weight", "model.layers.5.self_attn.k_norm.weight"},
  };
  for (auto& [g, h] : rows) {
    EXPECT_EQ(gguf_to_hf_name(g), h);
    EXPECT_EQ(hf_to_gguf_name(h), g);
  }
  for (const char* bad : {"rope_freqs.weight", "blk.x.attn_q.weight", "blk.01.attn_q.weight", "blk.0.attn_q",
                          "blk.0.nope.weight", "blk..attn_q.weight", ""})
    EXPECT_EQ(gguf_to_hf_name(bad), "") << bad;
  EXPECT_EQ(hf_to_gguf_name("model.layers.0.self_attn.rotary_emb.inv_freq"), "");
}

TEST(Checkpoint, QkPermutation) {
  // docs/spec/gguf.md §Q/K permutation, head_dim 8: GGUF rows of a head hold HF rows 0,4,1,5,2,6,3,7.
  std::vector<float> gguf_rows = {0, 4, 1, 5, 2, 6, 3, 7};
  std::vector<float> hf = gguf_unpermute_rows(gguf_rows.data(), 8, 1, 1);
  EXPECT_EQ(hf, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(gguf_permute_rows(hf.data(), 8, 1, 1), gguf_rows);
  // Two heads, three columns: rows move as wholes, heads stay apart.
  std::vector<float> m(16 * 3);
  for (size_t i = 0; i < m.size(); ++i) m[i] = float(i);
  auto u = gguf_unpermute_rows(m.data(), 16, 3, 2);
  EXPECT_EQ(u[3 * 1 + 2], m[3 * 2 + 2]);   // HF row 1 = GGUF row 2
  EXPECT_EQ(u[3 * 12 + 0], m[3 * 9 + 0]);  // head 1: HF row 8+4 = GGUF row 8+1
  EXPECT_EQ(gguf_permute_rows(u.data(), 16, 3, 2), m);
  EXPECT_THROW(gguf_unpermute_rows(m.data(), 16, 3, 3), UserError);
}

TEST(Checkpoint, TinyGgufsEqualTransformers) {
  json g = golden("tiny.json");
  for (auto& [name, t] : g.items()) {
    SCOPED_TRACE(name);
    Checkpoint ck = load_checkpoint(golden_dir() + t["file"].get<std::string>());
    EXPECT_EQ(ck.source_kind, "gguf");
    expect_tensors(ck, t["tensors"]);
    EXPECT_EQ(ck.config.tie_word_embeddings, t["config"]["tie_word_embeddings"].get<bool>());
    EXPECT_FALSE(ck.tokenizer);  // the tiny files carry no vocabulary
    EXPECT_EQ(ck.quantization["format"], "gguf");
    EXPECT_EQ(ck.quantization["tensors"].size(), ck.tensors.size());
  }
  Checkpoint l3 = load_checkpoint(golden_dir() + "tiny_llama3.gguf");
  EXPECT_EQ(l3.config.rope_scaling.type, "llama3");  // from rope_freqs.weight, which is dropped
  EXPECT_FALSE(l3.has("rope_freqs.weight"));
}

// Our HF writer's folder read back by our HF reader: the same tensors as transformers gives for
// the GGUF, single file and sharded.
TEST(Checkpoint, HfFolderRoundTrip) {
  json g = golden("tiny.json");
  for (uint64_t shard : {uint64_t(5'000'000'000ull), uint64_t(4096)}) {
    for (auto& [name, t] : g.items()) {
      SCOPED_TRACE(name + " shard " + std::to_string(shard));
      Checkpoint src = load_checkpoint(golden_dir() + t["file"].get<std::string>());
      std::string dir = test::temp_dir("ckpt-rt");
      HfWriteOptions o;
      o.max_shard_bytes = shard;
      write_hf_folder(src, dir, o);
      EXPECT_EQ(fs::exists(fs::path(dir) / "model.safetensors.index.json"), shard < 1'000'000);
      Checkpoint ck = load_checkpoint(dir);
      EXPECT_EQ(ck.source_kind, "hf");
      expect_tensors(ck, t["tensors"]);
      EXPECT_EQ(ck.config.to_hf_json().dump(), [&] {
        json j = src.config.to_hf_json();
        j["torch_dtype"] = "float32";
        return j.dump();
      }());
      fs::remove_all(dir);
    }
  }
}

// Folder inputs that must be refused with a line naming the folder or file and the problem.
TEST(Checkpoint, BadFolders) {
  Checkpoint src = load_checkpoint(golden_dir() + "tiny_qwen2.gguf");
  std::vector<std::string> made;
  auto make = [&](const std::string& tag) {
    std::string dir = test::temp_dir(tag);
    made.push_back(dir);
    write_hf_folder(src, dir, HfWriteOptions{});
    return fs::path(dir);
  };
  {
    std::string dir = test::temp_dir("noconfig");
    made.push_back(dir);
    EXPECT_EQ(user_error_of([&] { load_checkpoint(dir); }), dir + ": no config.json");
  }
  {
    fs::path d = make("badjson");
    write_text(d / "config.json", "{\"model_type\": \"qwen2\",");
    std::string m = user_error_of([&] { load_checkpoint(d.string()); });
    EXPECT_EQ(m.rfind((d / "config.json").string() + ": invalid JSON", 0), 0u) << m;
  }
  {
    fs::path d = make("arch");
    json j = src.config.to_hf_json();
    j["model_type"] = "gpt_neox";
    write_text(d / "config.json", j.dump());
    std::string m = user_error_of([&] { load_checkpoint(d.string()); });
    EXPECT_NE(m.find("unsupported architecture 'gpt_neox'"), std::string::npos) << m;
  }
  {
    fs::path d = make("quant");
    json j = src.config.to_hf_json();
    j["quantization_config"] = {{"quant_method", "gptq"}};
    write_text(d / "config.json", j.dump());
    std::string m = user_error_of([&] { load_checkpoint(d.string()); });
    EXPECT_NE(m.find("'gptq'"), std::string::npos) << m;
    // bitsandbytes is read, but only its 4-bit serialization.
    j["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_8bit", true}};
    write_text(d / "config.json", j.dump());
    m = user_error_of([&] { load_checkpoint(d.string()); });
    EXPECT_NE(m.find("only bitsandbytes 4-bit"), std::string::npos) << m;
  }
  // Weights that do not fit the config: a missing tensor, a wrong shape, a stranger, a dtype.
  auto with_tensors = [&](const std::string& tag, auto edit) {
    fs::path d = make(tag);
    NamedTensors ts;
    for (auto& [n, t] : src.tensors) ts.emplace_back(n, t);
    edit(ts);
    fs::remove(d / "model.safetensors");
    write_safetensors((d / "model.safetensors").string(), ts, {{"format", "pt"}});
    return user_error_of([&] { load_checkpoint(d.string()); });
  };
  std::string m = with_tensors("missing", [](NamedTensors& ts) { ts.pop_back(); });
  EXPECT_NE(m.find("missing tensor"), std::string::npos) << m;
  m = with_tensors("shape", [](NamedTensors& ts) {
    for (auto& [n, t] : ts)
      if (n == "model.norm.weight") t.shape = {8, 4};
  });
  EXPECT_NE(m.find("tensor model.norm.weight has shape [8, 4], expected [32]"), std::string::npos) << m;
  m = with_tensors("extra",
                   [](NamedTensors& ts) { ts.emplace_back("model.layers.7.mlp.up_proj.weight", ts[0].second); });
  EXPECT_NE(m.find("tensor model.layers.7.mlp.up_proj.weight is not part of a qwen2 model"), std::string::npos) << m;
  m = with_tensors("dtype", [](NamedTensors& ts) {
    for (auto& [n, t] : ts)
      if (n == "model.norm.weight") t.dtype = DType::I32;
  });
  EXPECT_NE(m.find("has dtype I32"), std::string::npos) << m;
  for (auto& d : made) fs::remove_all(d);
}

TEST(Checkpoint, BadFiles) {
  std::string dir = test::temp_dir("badgguf");
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  std::string good = bytes(golden_dir() + "tiny_qwen2.gguf");
  const std::string trunc = dir + "/trunc.gguf", magic = dir + "/magic.gguf", text = dir + "/notes.txt";
  write_text(trunc, good.substr(0, good.size() / 2));
  write_text(magic, "GGUX" + good.substr(4));
  write_text(text, "hello");
  for (const std::string& p : {trunc, magic}) {
    std::string m = user_error_of([&] { load_checkpoint(p); });
    EXPECT_EQ(m.rfind(p + ": ", 0), 0u) << m;
  }
  EXPECT_EQ(user_error_of([&] { load_checkpoint(text); }), text + ": not a GGUF file or a Hugging Face folder");
  EXPECT_EQ(user_error_of([&] { load_checkpoint(dir + "/none"); }), dir + "/none: no such file or folder");
  fs::remove_all(dir);
}

TEST(Checkpoint, RealModelEqualsTransformers) {
  QT_REQUIRE_FILE(test::model_gguf());
  auto t0 = std::chrono::steady_clock::now();
  Checkpoint ck = load_checkpoint(test::model_gguf());
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("load_checkpoint(SmolLM2 Q4_1): %.3f s\n", secs);
  EXPECT_LT(secs, 2.0);  // the acceptance bound; typically a few tenths
  json g = golden("smollm2_q4_1.json");
  expect_tensors(ck, g["tensors"]);
  EXPECT_FALSE(ck.has("lm_head.weight"));  // tied
  EXPECT_EQ(ck.quantization["tensors"]["model.layers.0.self_attn.q_proj.weight"]["ggml_type"], "Q4_1");
  EXPECT_EQ(ck.quantization["tensors"]["model.embed_tokens.weight"]["ggml_type"], "Q8_0");
  EXPECT_EQ(ck.quantization["file_type"], 3);
  ASSERT_TRUE(ck.tokenizer);
  EXPECT_EQ(ck.tokenizer->vocab_size(), 49152);
  EXPECT_FALSE(ck.tokenizer->add_bos());  // tokenizer.ggml.add_bos_token = false
  EXPECT_EQ(ck.tokenizer->bos_id(), 1);
  EXPECT_EQ(ck.tokenizer->eos_id(), 2);
}

}  // namespace
}  // namespace qt

// write_file_atomic: a regular file is replaced whole; a device (/dev/stdout, /dev/null) or a pipe
// is written into, not replaced by a renamed temporary.
TEST(WriteFileAtomic, RegularFileReplacedDeviceWrittenInto) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("qt_wfa_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string f = (dir / "a.json").string();
  qt::write_file_atomic(f, "old text", 8);
  qt::write_file_atomic(f, "new", 3);
  EXPECT_EQ(fs::file_size(f), 3u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // no temporary left
  qt::write_file_atomic("/dev/null", "x", 1);
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_THROW(qt::write_file_atomic(dir.string(), "x", 1), qt::UserError);
  fs::remove_all(dir);
}
