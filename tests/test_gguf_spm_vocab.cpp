// GGUF from an HF folder with a SentencePiece-style tokenizer.json (Llama-2 / Mistral style: byte
// fallback, '▁' for spaces, tokenizer.model beside it), against llama.cpp
// (tests/golden/make_spm_gguf_golden.py):
//  - `convert --format gguf` writes the tokenizer.ggml.* keys convert_hf_to_gguf.py writes: the
//    tokens, scores and types of tokenizer.model plus added_tokens_decoder, special ids, add_bos /
//    add_sep, add_space_prefix: every key and nothing else (a Llama and a Gemma 2 folder with the
//    same tokenizer files); add_* flags on hand-made post-processors as gguf.SpecialVocab sets them;
//  - `quanttool tokenize` on that file gives llama-tokenize's ids on llama.cpp's own file (with
//    and without parse_special), and HF tokenizers' ids wherever HF and llama.cpp follow the same
//    rules (unicode, byte fallback);
//  - the tokenizer.model reader: its pieces as sentencepiece reads them; bad bytes are a UserError;
//  - without tokenizer.model: exit 2, one line.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer/sentencepiece_model.h"
#include "formats/tokenizer/tokenizer.h"
#include "tests/support.h"

namespace qt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string golden_dir() { return test::source_dir() + "/tests/golden/spm_gguf/"; }
std::string folder(const std::string& name = "tiny-llama-spm") { return golden_dir() + name; }
json golden(const std::string& name = "tiny-llama-spm") {
  return test::read_json(golden_dir() + name + ".tokenizer.json");
}
int qt_run(const std::string& args, std::string* out) { return test::run_cmd(test::quanttool_bin() + " " + args, out); }

std::string convert_to_gguf(const std::string& tag, const std::string& name = "tiny-llama-spm") {
  const std::string out = test::temp_dir(tag) + "/ours.gguf";
  std::string log;
  EXPECT_EQ(qt_run("convert --in " + folder(name) + " --out " + out + " --format gguf --gguf-type f32", &log), 0)
      << log;
  return out;
}

std::vector<int32_t> read_ids(const std::string& path) {
  std::vector<int32_t> ids;
  std::ifstream f(path);
  for (int32_t id; f >> id;) ids.push_back(id);
  return ids;
}

void expect_converter_keys(const std::string& name, const GgufFile& f) {
  const json g = golden(name);
  for (const auto& [key, want] : g["keys"].items()) {
    if (!f.has(key)) {
      ADD_FAILURE() << key << " missing";
      continue;
    }
    if (want.is_string()) {
      EXPECT_EQ(f.get_string(key), want.get<std::string>()) << key;
    } else if (want.is_boolean()) {
      EXPECT_EQ(f.get_bool(key), want.get<bool>()) << key;
    } else if (want.is_number_integer()) {
      EXPECT_EQ(f.get_int(key), want.get<int64_t>()) << key;
    } else if (key == "tokenizer.ggml.tokens") {
      EXPECT_EQ(f.get_string_array(key), want.get<std::vector<std::string>>());
    } else if (key == "tokenizer.ggml.scores") {
      const std::vector<double>& got = f.get_float_array(key);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(float(got[i]), want[i].get<float>()) << "score " << i;
    } else if (key == "tokenizer.ggml.token_type") {
      EXPECT_EQ(f.get_int_array(key), want.get<std::vector<int64_t>>());
    } else {
      ADD_FAILURE() << "unchecked key " << key;
    }
  }
  for (const auto& [key, v] : f.metadata()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    EXPECT_TRUE(g["keys"].contains(key)) << key << " not written by llama.cpp";
  }
}

TEST(GgufSpmVocab, KeysEqualConvertHfToGguf) {
  GgufFile f = GgufFile::open(convert_to_gguf("spm_keys"));
  expect_converter_keys("tiny-llama-spm", f);
  // The shape of the golden itself: byte pieces, the special-looking added token typed CONTROL, padding.
  const auto& types = f.get_int_array("tokenizer.ggml.token_type");
  EXPECT_EQ(types[3], 6);  // <0x00> BYTE
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")[512], "<|sep|>");
  EXPECT_EQ(types[512], 3);
}

// Gemma2Model.set_vocab: add_space_prefix false; the pad id from config.json.
TEST(GgufSpmVocab, GemmaKeysEqualConvertHfToGguf) {
  GgufFile f = GgufFile::open(convert_to_gguf("spm_keys_gemma", "tiny-gemma2-spm"));
  expect_converter_keys("tiny-gemma2-spm", f);
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_space_prefix"));
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 0);
}

TEST(GgufSpmVocab, TokenizeEqualsLlamaCppAndHf) {
  const json g = golden();
  const std::string gguf = convert_to_gguf("spm_tok"), tmp = test::temp_dir("spm_tok_texts");
  const auto& texts = g["texts"];
  std::set<size_t> hf_same;
  for (const json& i : g["hf_same"]) hf_same.insert(i.get<size_t>());
  ASSERT_TRUE(hf_same.count(3));  // the unicode / byte-fallback text
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string in = tmp + "/" + std::to_string(i) + ".txt", out = in + ".ids";
    std::ofstream(in, std::ios::binary) << texts[i].get<std::string>();
    std::string log;
    ASSERT_EQ(qt_run("tokenize --model " + gguf + " --text " + in + " --out " + out + " --add-special", &log), 0)
        << log;
    const std::vector<int32_t> ids = read_ids(out);
    EXPECT_EQ(ids, g["llama_ids"][i].get<std::vector<int32_t>>()) << "text " << i;
    if (hf_same.count(i)) {
      EXPECT_EQ(ids, g["hf_ids"][i].get<std::vector<int32_t>>()) << "text " << i;
    }
  }
  // Special-token text in the input ("<s>") matched as the token: llama.cpp's parse_special.
  auto tok = tokenizer_from_gguf(GgufFile::open(gguf));
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(tok->encode(texts[i].get<std::string>(), true, true),
              g["llama_ids_parse_special"][i].get<std::vector<int32_t>>())
        << "text " << i;
}

TEST(GgufSpmVocab, SentencePieceModelReader) {
  const tok::SentencePieceModel m = tok::read_sentencepiece_model(folder() + "/tokenizer.model");
  const json g = golden();
  ASSERT_EQ(m.pieces.size(), 512u);
  EXPECT_EQ(m.pieces[0].text, "<unk>");
  EXPECT_EQ(m.pieces[0].type, 2);  // UNKNOWN (the converter's added_tokens_decoder makes it CONTROL)
  EXPECT_EQ(m.pieces[1].type, 3);
  EXPECT_EQ(m.pieces[3].text, "<0x00>");
  EXPECT_EQ(m.pieces[3].type, 6);
  for (size_t i = 3; i < m.pieces.size(); ++i) {
    EXPECT_EQ(m.pieces[i].text, g["keys"]["tokenizer.ggml.tokens"][i].get<std::string>()) << i;
    EXPECT_EQ(m.pieces[i].score, g["keys"]["tokenizer.ggml.scores"][i].get<float>()) << i;
  }
  EXPECT_TRUE(m.add_dummy_prefix);
  std::ifstream f(folder() + "/tokenizer.model", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (size_t cut : {size_t(1), size_t(7), bytes.size() / 2}) {
    // Cut inside the first piece (its length prefix then runs past the end) or mid-file; a cut
    // that lands exactly between fields is a valid shorter model.
    try {
      const tok::SentencePieceModel part = tok::parse_sentencepiece_model(std::string_view(bytes).substr(0, cut), "x");
      EXPECT_LT(part.pieces.size(), m.pieces.size()) << cut;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("x: not a SentencePiece model"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(tok::parse_sentencepiece_model("", "x"), UserError);              // no pieces
  EXPECT_THROW(tok::parse_sentencepiece_model("\x0a\x05\x0a", "x"), UserError);  // piece past the end
  EXPECT_THROW(tok::parse_sentencepiece_model("\x0f", "x"), UserError);          // wire type 7
}

// The converter's per-model rules on added tokens and add_space_prefix, on hand-made configs.
TEST(GgufSpmVocab, AddedTokenRulesPerArchitecture) {
  const json tc = json::parse(R"({"added_tokens_decoder": {
      "510": {"content": "a\u2581b", "special": false},
      "511": {"content": "<|sep|>", "special": false},
      "512": {"content": "<extra>", "special": true}}})");
  const json tj = json::parse(R"({"added_tokens": [{"id": 509, "content": "<tj>", "special": true}]})");
  const GgufTokenizerMeta llama = tok::gguf_vocab_from_sentencepiece(folder(), 514, "llama", tj, tc);
  ASSERT_EQ(llama.tokens.size(), 514u);
  EXPECT_EQ(llama.tokens[510], "a b");  // user-defined: '▁' written as a space
  EXPECT_EQ(llama.token_type[510], 4);
  EXPECT_EQ(llama.token_type[511], 3);  // special-looking: CONTROL
  EXPECT_EQ(llama.token_type[512], 3);
  EXPECT_EQ(llama.scores[512], -1000.0f);
  EXPECT_EQ(llama.tokens[509], tok::read_sentencepiece_model(folder() + "/tokenizer.model").pieces[509].text)
      << "tokenizer.json's added_tokens are read for Phi-3 only";
  EXPECT_EQ(llama.tokens[513], "[PAD513]");  // beyond every source: padding
  EXPECT_EQ(llama.scores[513], -10000.0f);
  EXPECT_EQ(llama.token_type[513], 5);
  const GgufTokenizerMeta phi3 = tok::gguf_vocab_from_sentencepiece(folder(), 514, "phi3", tj, tc);
  EXPECT_EQ(phi3.tokens[510],
            "a\xE2\x96\x81"
            "b");
  EXPECT_EQ(phi3.token_type[511], 4);  // no special-looking rule
  EXPECT_EQ(phi3.tokens[509], "<tj>");
  EXPECT_EQ(phi3.token_type[509], 3);
  // add_space_prefix: Gemma 2/3 write false; llama copies tokenizer_config's add_prefix_space.
  auto t = tokenizer_from_hf_dir(folder());
  EXPECT_EQ(tokenizer_to_gguf(*t, {513, "gemma2"}).add_space_prefix, 0);
  EXPECT_EQ(tokenizer_to_gguf(*t, {513, "gemma3"}).add_space_prefix, 0);
  EXPECT_EQ(tokenizer_to_gguf(*t, {513, "llama"}).add_space_prefix, -1);  // the folder's is null
}

// add_bos / add_eos / add_sep as gguf.SpecialVocab decides them (expected values: gguf-py 0.3.36's
// SpecialVocab(dir).add_special_token on these files).
TEST(GgufSpmVocab, AddFlagsAsSpecialVocab) {
  auto flags = [](const char* tj, const char* tc) {
    GgufTokenizerMeta m;
    tok::special_vocab_add_flags(json::parse(tj), tc ? json::parse(tc) : json(), &m);
    return std::string(m.write_add_bos ? (m.add_bos ? "B" : "b") : "-") +
           (m.write_add_eos ? (m.add_eos ? "E" : "e") : "-") +
           (m.add_sep < 0 ? "-"
            : m.add_sep   ? "S"
                          : "s");
  };
  EXPECT_EQ(flags(R"({"post_processor": null})", R"({"bos_token": "<s>"})"), "---");
  EXPECT_EQ(flags(R"({"post_processor": {"type": "ByteLevel"}})", R"({"add_bos_token": true})"), "be-");
  EXPECT_EQ(flags(R"({"post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "</s>"}}],
      "pair": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "</s>"}},
               {"SpecialToken": {"id": "</s>"}}, {"Sequence": {"id": "B"}}, {"SpecialToken": {"id": "</s>"}}]}})",
                  R"({"bos_token": "<s>", "eos_token": "</s>"})"),
            "BES");
  EXPECT_EQ(flags(R"({"post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "[CLS]"}}, {"Sequence": {"id": "A"}}],
      "pair": [{"SpecialToken": {"id": "[CLS]"}}, {"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "[SEP]"}},
               {"Sequence": {"id": "B"}}]}})",
                  R"({"sep_token": "[SEP]", "add_eos_token": false})"),
            "BeS");
  EXPECT_EQ(flags(R"({"post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel"},
      {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
       "pair": []}]}})",
                  nullptr),
            "Be-");
}

TEST(GgufSpmVocab, NoTokenizerModelExit2) {
  const std::string tmp = test::temp_dir("spm_no_model"), dir = tmp + "/hf", out = tmp + "/o.gguf";
  fs::create_directories(dir);
  for (const char* name : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(folder() + "/" + name, dir + "/" + name);
  std::string log;
  EXPECT_EQ(qt_run("convert --in " + dir + " --out " + out + " --format gguf --gguf-type f32", &log), 2) << log;
  EXPECT_NE(log.find("error: "), std::string::npos) << log;
  EXPECT_NE(log.find("tokenizer.model"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace qt
