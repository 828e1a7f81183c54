// Tokenizers. References:
//  - llama.cpp's tokenizer test vectors (data/tokenizer-vectors, made by the models' own
//    HF tokenizers, `add_special_tokens=False`), split exactly as tests/test-tokenizer-0.cpp does;
//  - for SmolLM2 on wiki.test.raw and for the Llama-3 / Qwen2 pre-tokenizers: ids produced by the
//    Python `tokenizers` library (tests/golden/make_tokenizer_goldens.py, committed output under
//    tests/golden/tokenizer/);
//  - facts about the real model's GGUF (docs/spec/gguf.md §Tokenizer keys);
//  - decode(encode(x)) == x for the byte-exact tokenizers.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <zlib.h>

#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer/tokenizer.h"
#include "tests/support.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif
#ifdef NDEBUG
constexpr bool kOptimized = true;
#else
constexpr bool kOptimized = false;
#endif

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string vectors(const std::string& name) {
  return qt::test::data_file("tokenizer-vectors/ggml-vocab-" + name + ".gguf");
}
std::string golden(const std::string& name) { return qt::test::source_dir() + "/tests/golden/tokenizer/" + name; }

// Loading a vocabulary takes ~0.1 s: load each once per run.
const qt::Tokenizer& cached(const std::string& path) {
  static std::map<std::string, std::unique_ptr<qt::Tokenizer>> cache;
  auto& t = cache[path];
  if (!t) t = qt::tokenizer_from_gguf(qt::GgufFile::open(path));
  return *t;
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// tests/test-tokenizer-0.cpp: .inp split on "\n__ggml_vocab_test__\n" (the file ends with one, which
// adds no case); .out one line per case, ids separated by spaces.
std::vector<Case> read_cases(const std::string& gguf) {
  const std::string raw = read_file(gguf + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inp;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inp.push_back(raw.substr(pos));
      break;
    }
    inp.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(gguf + ".out");
  std::vector<Case> cases;
  std::string line;
  size_t i = 0;
  while (std::getline(out, line)) {
    Case c;
    if (i < inp.size()) c.text = inp[i];
    std::istringstream ls(line);
    int32_t id;
    while (ls >> id) c.ids.push_back(id);
    cases.push_back(std::move(c));
    ++i;
  }
  EXPECT_EQ(cases.size(), inp.size()) << gguf;
  return cases;
}

std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) {
    s += ' ';
    s += std::to_string(x);
  }
  return s;
}

class Vectors : public ::testing::TestWithParam<const char*> {};

TEST_P(Vectors, EveryCaseMatchesTheHfIds) {
  const std::string path = vectors(GetParam());
  QT_REQUIRE_FILE(path);
  const qt::Tokenizer* tok = &cached(path);
  const auto cases = read_cases(path);
  ASSERT_EQ(cases.size(), 46u);
  int failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto got = tok->encode(cases[i].text, /*add_special=*/false);
    if (got != cases[i].ids) {
      ++failed;
      ADD_FAILURE() << GetParam() << " case " << i << " '" << cases[i].text << "'\n  expected" << show(cases[i].ids)
                    << "\n  got     " << show(got);
    }
  }
  EXPECT_EQ(failed, 0);
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, Vectors,
                         ::testing::Values("gpt-2", "llama-spm", "phi-3", "starcoder", "falcon", "deepseek-coder",
                                           "refact", "mpt"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace

namespace {

std::string wiki() { return qt::test::data_file("wikitext-2/wiki.test.raw"); }

json read_json(const std::string& path) { return json::parse(read_file(path)); }

// CRC-32 (zlib) of the ids as little-endian int32: what make_tokenizer_goldens.py computes.
uint32_t crc_ids(const std::vector<int32_t>& ids) {
  std::vector<uint8_t> b(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto u = static_cast<uint32_t>(ids[i]);
    b[4 * i] = uint8_t(u);
    b[4 * i + 1] = uint8_t(u >> 8);
    b[4 * i + 2] = uint8_t(u >> 16);
    b[4 * i + 3] = uint8_t(u >> 24);
  }
  return static_cast<uint32_t>(crc32(0L, b.data(), static_cast<uInt>(b.size())));
}

std::string from_hex(const std::string& h) {
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2) s.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return s;
}

std::vector<int32_t> as_ids(const json& j) { return j.get<std::vector<int32_t>>(); }

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

// Writes the HF files for `tok` into a fresh folder; with QT_TOKENIZER_EXPORT_DIR set, into
// $QT_TOKENIZER_EXPORT_DIR/<tag>, kept for tests/golden/make_tokenizer_goldens.py.
fs::path export_hf(const qt::Tokenizer& tok, const std::string& tag) {
  fs::path dir;
  if (const char* e = std::getenv("QT_TOKENIZER_EXPORT_DIR"))
    dir = fs::path(e) / tag;
  else
    dir = fs::path(qt::test::temp_dir("tok-export")) / tag;
  fs::create_directories(dir);
  write_text(dir / "tokenizer.json", tok.to_hf_tokenizer_json().dump());
  write_text(dir / "tokenizer_config.json", tok.to_hf_tokenizer_config().dump(2));
  return dir;
}

std::string vocab_path(const std::string& name) { return name == "smollm2" ? qt::test::model_gguf() : vectors(name); }

TEST_P(Vectors, DecodeInvertsEncode) {
  const std::string path = vectors(GetParam());
  QT_REQUIRE_FILE(path);
  const qt::Tokenizer* tok = &cached(path);
  for (const Case& c : read_cases(path)) EXPECT_EQ(tok->decode(tok->encode(c.text, false)), c.text) << GetParam();
}

// The exported tokenizer.json, read back by our HF loader, must give the HF ids too: checks the
// exporter and the tokenizer.json path (for SentencePiece vocabularies: merges recovered from
// the scores, as transformers does, against ids made by the original HF tokenizers).
TEST_P(Vectors, ExportedTokenizerJsonReproducesEveryCase) {
  const std::string path = vectors(GetParam());
  QT_REQUIRE_FILE(path);
  const qt::Tokenizer* tok = &cached(path);
  auto hf = qt::tokenizer_from_hf_dir(export_hf(*tok, GetParam()).string());
  EXPECT_EQ(hf->vocab_size(), tok->vocab_size());
  EXPECT_EQ(hf->bos_id(), tok->bos_id());
  EXPECT_EQ(hf->add_bos(), tok->add_bos());
  for (const Case& c : read_cases(path))
    EXPECT_EQ(hf->encode(c.text, false), c.ids) << GetParam() << " '" << c.text << "'";
}

// ---------------------------------------------------------------------------------------------
// The real model: SmolLM2-135M-Instruct.

TEST(SmolLM2, GgufFacts) {
  QT_REQUIRE_FILE(qt::test::model_gguf());
  const qt::Tokenizer* tok = &cached(qt::test::model_gguf());
  EXPECT_EQ(tok->kind(), "bpe (smollm)");
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);   // <|im_start|>
  EXPECT_EQ(tok->eos_id(), 2);   // <|im_end|>
  EXPECT_FALSE(tok->add_bos());  // tokenizer.ggml.add_bos_token = false
  EXPECT_EQ(tok->encode("Hello world", true), tok->encode("Hello world", false));
  EXPECT_EQ(tok->decode({1}), "<|im_start|>");
}

TEST(SmolLM2, WikiTestMatchesHfTokenizersAndIsFast) {
  QT_REQUIRE_FILE(qt::test::model_gguf());
  QT_REQUIRE_FILE(wiki());
  const json g = read_json(golden("smollm2_wiki.json"));
  const qt::Tokenizer* tok = &cached(qt::test::model_gguf());
  const std::string text = read_file(wiki());
  ASSERT_EQ(text.size(), 1290590u);
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok->encode(text, /*add_special=*/false);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ timing   ] wiki.test.raw: " << ids.size() << " tokens in " << secs << " s ("
            << text.size() / secs / 1e6 << " MB/s, one thread)\n";
  ::testing::Test::RecordProperty("wiki_encode_seconds", std::to_string(secs));
  EXPECT_EQ(ids.size(), g["count"].get<size_t>());
  EXPECT_EQ(crc_ids(ids), g["crc32"].get<uint32_t>());
  const auto first = as_ids(g["first_ids"]);
  ASSERT_GE(ids.size(), first.size());
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + first.size()), first);
  if (!kSanitized && kOptimized) {
    EXPECT_LT(secs, 2.0) << "wiki.test.raw must encode in under 2 s";
  }
  EXPECT_EQ(tok->decode(ids), text);
}

TEST(SmolLM2, ExportDescribesTheRealTokenizer) {
  QT_REQUIRE_FILE(qt::test::model_gguf());
  const qt::Tokenizer* tok = &cached(qt::test::model_gguf());
  const json j = tok->to_hf_tokenizer_json();
  const json c = tok->to_hf_tokenizer_config();
  // HuggingFaceTB/SmolLM2-135M-Instruct tokenizer.json: Digits(individual) then ByteLevel(regex).
  const json& pre = j["pre_tokenizer"];
  ASSERT_EQ(pre["type"], "Sequence");
  ASSERT_EQ(pre["pretokenizers"].size(), 2u);
  EXPECT_EQ(pre["pretokenizers"][0], (json{{"type", "Digits"}, {"individual_digits", true}}));
  EXPECT_EQ(pre["pretokenizers"][1]["type"], "ByteLevel");
  EXPECT_EQ(pre["pretokenizers"][1]["use_regex"], true);
  EXPECT_EQ(pre["pretokenizers"][1]["add_prefix_space"], false);
  EXPECT_TRUE(j["normalizer"].is_null());
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(j["post_processor"]["type"], "ByteLevel");
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["vocab"].size(), 49152u);
  EXPECT_EQ(j["model"]["merges"].size(), 48900u);
  EXPECT_EQ(j["model"]["vocab"]["<|im_start|>"], 1);
  EXPECT_EQ(j["model"]["byte_fallback"], false);
  ASSERT_EQ(j["added_tokens"].size(), 17u);
  for (const json& a : j["added_tokens"]) EXPECT_EQ(a["special"], true) << a.dump();
  EXPECT_EQ(c["add_bos_token"], false);
  EXPECT_EQ(c["bos_token"], "<|im_start|>");
  EXPECT_EQ(c["eos_token"], "<|im_end|>");
  EXPECT_EQ(c["unk_token"], "<|endoftext|>");
  EXPECT_EQ(c["model_max_length"], 8192);
  EXPECT_TRUE(c["chat_template"].is_string() && !c["chat_template"].get<std::string>().empty());
  EXPECT_EQ(c["added_tokens_decoder"].size(), 17u);

  // Read back through the tokenizer.json loader: the same ids as the HF library on all of wiki.
  QT_REQUIRE_FILE(wiki());
  auto hf = qt::tokenizer_from_hf_dir(export_hf(*tok, "smollm2").string());
  EXPECT_EQ(hf->kind(), "bpe (tokenizer.json)");
  EXPECT_FALSE(hf->add_bos());
  const json g = read_json(golden("smollm2_wiki.json"));
  const auto ids = hf->encode(read_file(wiki()), false);
  EXPECT_EQ(ids.size(), g["count"].get<size_t>());
  EXPECT_EQ(crc_ids(ids), g["crc32"].get<uint32_t>());
}

// Strings in the golden file, tokenized by the Python `tokenizers` library (which always matches
// added tokens, so compare with parse_special).
TEST(SmolLM2, StringsMatchHfTokenizers) {
  QT_REQUIRE_FILE(qt::test::model_gguf());
  const qt::Tokenizer* tok = &cached(qt::test::model_gguf());
  const json g = read_json(golden("smollm2_wiki.json"));
  ASSERT_GT(g["strings"].size(), 5u);
  for (const json& s : g["strings"]) {
    const std::string text = s["text"].get<std::string>();
    EXPECT_EQ(tok->encode(text, false, /*parse_special=*/true), as_ids(s["ids"])) << "'" << text << "'";
  }
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's own tokenization (llama-tokenize, recorded by make_tokenizer_goldens.py).

TEST(LlamaCppGolden, WholeWikiTestForEveryVocabulary) {
  QT_REQUIRE_FILE(wiki());
  const json g = read_json(golden("llamacpp.json"));
  const std::string text = read_file(wiki());
  ASSERT_GE(g["wiki"].size(), 9u);
  for (const auto& [name, want] : g["wiki"].items()) {
    const std::string path = vocab_path(name);
    QT_REQUIRE_FILE(path);
    const auto ids = cached(path).encode(text, false);
    EXPECT_EQ(ids.size(), want["count"].get<size_t>()) << name;
    EXPECT_EQ(crc_ids(ids), want["crc32"].get<uint32_t>()) << name;
  }
}

// Chat markup with and without parse_special, BOS/EOS, Phi-3's stripped spaces, invalid UTF-8.
TEST(LlamaCppGolden, SpecialTokensAndInvalidUtf8) {
  const json g = read_json(golden("llamacpp.json"));
  ASSERT_GE(g["strings"].size(), 8u);
  for (const json& s : g["strings"]) {
    const std::string name = s["vocab"].get<std::string>();
    const std::string path = vocab_path(name);
    QT_REQUIRE_FILE(path);
    const std::string text = from_hex(s["hex"].get<std::string>());
    EXPECT_EQ(cached(path).encode(text, s["add_special"].get<bool>(), s["parse_special"].get<bool>()), as_ids(s["ids"]))
        << name << " '" << text << "' add_special=" << s["add_special"] << " parse_special=" << s["parse_special"];
  }
}

// ---------------------------------------------------------------------------------------------
// Llama-3 and Qwen2 pre-tokenizers. No vector files exist for them, so the golden comes from the
// `tokenizers` library running the HF Split regexes over SmolLM2's vocabulary; here the same
// vocabulary is put into a GGUF with tokenizer.ggml.pre = llama-bpe / qwen2.

struct GgufBuilder {
  std::vector<uint8_t> kv;
  uint64_t n = 0;
  void raw(const void* p, size_t k) {
    const auto* b = static_cast<const uint8_t*>(p);
    kv.insert(kv.end(), b, b + k);
  }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void key(const std::string& k, uint32_t type) {
    str(k);
    u32(type);
    ++n;
  }
  void add_string(const std::string& k, const std::string& v) {
    key(k, 8);
    str(v);
  }
  void add_u32(const std::string& k, uint32_t v) {
    key(k, 4);
    u32(v);
  }
  void add_strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9);
    u32(8);
    u64(v.size());
    for (const auto& s : v) str(s);
  }
  void add_i32s(const std::string& k, const std::vector<int64_t>& v) {
    key(k, 9);
    u32(5);
    u64(v.size());
    for (int64_t x : v) {
      const auto i = static_cast<int32_t>(x);
      raw(&i, 4);
    }
  }
  std::vector<uint8_t> finish() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    const uint64_t zero = 0;
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(&zero), reinterpret_cast<const uint8_t*>(&zero) + 8);
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(&n), reinterpret_cast<const uint8_t*>(&n) + 8);
    out.insert(out.end(), kv.begin(), kv.end());
    return out;
  }
};

std::unique_ptr<qt::Tokenizer> tokenizer_from_builder(const GgufBuilder& b) {
  const std::vector<uint8_t> bytes = b.finish();
  return qt::tokenizer_from_gguf(qt::GgufFile::parse(bytes.data(), bytes.size(), "built.gguf"));
}

TEST(BpeFamilies, Llama3AndQwen2MatchHfTokenizers) {
  QT_REQUIRE_FILE(qt::test::model_gguf());
  const json g = read_json(golden("bpe_families.json"));
  const auto src = qt::GgufFile::open(qt::test::model_gguf());
  for (const char* pre : {"llama-bpe", "qwen2"}) {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "gpt2");
    b.add_string("tokenizer.ggml.pre", pre);
    b.add_strings("tokenizer.ggml.tokens", src.get_string_array("tokenizer.ggml.tokens"));
    b.add_i32s("tokenizer.ggml.token_type", src.get_int_array("tokenizer.ggml.token_type"));
    b.add_strings("tokenizer.ggml.merges", src.get_string_array("tokenizer.ggml.merges"));
    b.add_u32("tokenizer.ggml.bos_token_id", 1);
    auto tok = tokenizer_from_builder(b);
    EXPECT_EQ(tok->kind(), std::string("bpe (") + pre + ")");
    // And through the exported tokenizer.json (HF's own Llama-3 / Qwen2 layout).
    auto hf = qt::tokenizer_from_hf_dir(export_hf(*tok, pre).string());
    const json& cases = g[pre];
    ASSERT_GT(cases.size(), 40u) << pre;
    for (const json& c : cases) {
      const std::string text = c["text"].get<std::string>();
      EXPECT_EQ(tok->encode(text, false), as_ids(c["ids"])) << pre << " '" << text << "'";
      EXPECT_EQ(hf->encode(text, false), as_ids(c["ids"])) << pre << " (tokenizer.json) '" << text << "'";
    }
    // llama.cpp: llama-bpe turns add_bos on; qwen2 leaves it off.
    EXPECT_EQ(tok->add_bos(), std::string(pre) == "llama-bpe");
  }
}

// SentencePiece-style tokenizer.json layouts other than Llama-2's legacy normalizer: the exported
// Llama-2 file with a Metaspace pre-tokenizer instead, against `tokenizers` on the same file.
TEST(HfLayouts, MetaspaceVariantsMatchHfTokenizers) {
  const std::string spm = vectors("llama-spm");
  QT_REQUIRE_FILE(spm);
  const json g = read_json(golden("spm_metaspace.json"));
  json base = cached(spm).to_hf_tokenizer_json();
  for (const char* variant : {"first_nosplit", "always_split"}) {
    json j = base;
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = g[variant]["pre_tokenizer"];
    const fs::path dir = fs::path(qt::test::temp_dir("tok-meta")) / variant;
    fs::create_directories(dir);
    write_text(dir / "tokenizer.json", j.dump());
    auto tok = qt::tokenizer_from_hf_dir(dir.string());
    EXPECT_EQ(tok->kind(), "bpe-spm (tokenizer.json)");
    ASSERT_GT(g[variant]["cases"].size(), 40u);
    for (const json& c : g[variant]["cases"]) {
      const std::string text = c["text"].get<std::string>();
      EXPECT_EQ(tok->encode(text, false, /*parse_special=*/true), as_ids(c["ids"])) << variant << " '" << text << "'";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// BOS/EOS as the files say, and bad input.

TEST(Specials, BosFollowsTheFile) {
  const std::string spm = vectors("llama-spm");
  QT_REQUIRE_FILE(spm);
  const qt::Tokenizer* tok = &cached(spm);
  EXPECT_EQ(tok->kind(), "spm");
  EXPECT_TRUE(tok->add_bos());   // tokenizer.ggml.add_bos_token = true
  EXPECT_FALSE(tok->add_eos());  // tokenizer.ggml.add_eos_token = false
  const auto with = tok->encode("Hello", true), without = tok->encode("Hello", false);
  ASSERT_EQ(with.size(), without.size() + 1);
  EXPECT_EQ(with[0], 1);
  EXPECT_EQ(std::vector<int32_t>(with.begin() + 1, with.end()), without);
  EXPECT_TRUE(tok->encode("", false).empty());
  EXPECT_EQ(tok->encode("", true), std::vector<int32_t>{1});
}

template <typename F>
void expect_user_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no UserError (expected one mentioning '" << needle << "')";
  } catch (const qt::UserError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, BadGgufMetadata) {
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "bert");
    b.add_strings("tokenizer.ggml.tokens", {"a", "b"});
    expect_user_error([&] { tokenizer_from_builder(b); }, "bert");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "gpt2");
    b.add_string("tokenizer.ggml.pre", "no-such-pre");
    b.add_strings("tokenizer.ggml.tokens", {"a", "b"});
    b.add_strings("tokenizer.ggml.merges", {"a b"});
    expect_user_error([&] { tokenizer_from_builder(b); }, "no-such-pre");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "gpt2");
    b.add_string("tokenizer.ggml.pre", "gpt-2");
    b.add_strings("tokenizer.ggml.tokens", {"a", "b"});
    expect_user_error([&] { tokenizer_from_builder(b); }, "merges");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama");
    b.add_strings("tokenizer.ggml.tokens", {"a", "b", "a"});
    expect_user_error([&] { tokenizer_from_builder(b); }, "same text");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama");
    b.add_strings("tokenizer.ggml.tokens", {"a", "b"});
    b.add_strings("tokenizer.ggml.scores", {"x", "y"});
    expect_user_error([&] { tokenizer_from_builder(b); }, "tokenizer.ggml.scores");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama");
    b.add_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
    auto tok = tokenizer_from_builder(b);
    expect_user_error([&] { tok->decode({0, 4}); }, "token id 4");
    expect_user_error([&] { tok->decode({-1}); }, "token id -1");
  }
}

TEST(TokenizerErrors, BadTokenizerJson) {
  const fs::path dir = qt::test::temp_dir("tok-bad");
  expect_user_error([&] { qt::tokenizer_from_hf_dir(dir.string()); }, "tokenizer.json");
  write_text(dir / "tokenizer.json", "{\"model\": ");
  expect_user_error([&] { qt::tokenizer_from_hf_dir(dir.string()); }, "invalid JSON");
  write_text(dir / "tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  expect_user_error([&] { qt::tokenizer_from_hf_dir(dir.string()); }, "WordPiece");
  write_text(dir / "tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                 "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Removed", "invert": false}})");
  expect_user_error([&] { qt::tokenizer_from_hf_dir(dir.string()); }, "Removed");
  write_text(dir / "tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                   {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated", "invert": false},
                   {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}})");
  expect_user_error([&] { qt::tokenizer_from_hf_dir(dir.string()); }, "regex");
  write_text(dir / "tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": "zero"}}})");
  expect_user_error([&] { qt::tokenizer_from_hf_dir(dir.string()); }, "tokenizer.json");
}

}  // namespace
