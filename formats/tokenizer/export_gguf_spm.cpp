// The SentencePiece vocabulary of an HF folder as llama.cpp's convert_hf_to_gguf.py writes it
// (conversion/base.py TextModel._create_vocab_sentencepiece; conversion/phi.py
// Phi3MiniModel.set_vocab for Phi-3): every id of the config's vocab_size starts as
// "[PAD<id>]", score -10000, UNUSED; tokenizer.model's pieces fill their ids with their scores
// and types (SentencePieceProcessor's IsUnknown / IsControl / IsUnused / IsByte, anything else,
// user-defined pieces included, NORMAL); then the added tokens of added_tokens.json
// (USER_DEFINED) and tokenizer_config.json's added_tokens_decoder (CONTROL when special or
// special-looking, else USER_DEFINED with '▁' written as a space; Phi-3: CONTROL when special,
// no space rewrite, and tokenizer.json's added_tokens after them), all with score -1000.
#include <filesystem>
#include <fstream>

#include "formats/error.h"
#include "formats/tokenizer/sentencepiece_model.h"
#include "formats/tokenizer/unicode.h"
#include "formats/tokenizer/vocab.h"

namespace qt::tok {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool starts_ends(const std::string& s, std::string_view a, std::string_view b) {
  return s.size() >= a.size() + b.size() && s.compare(0, a.size(), a) == 0 &&
         s.compare(s.size() - b.size(), b.size(), b) == 0;
}

// convert_hf_to_gguf.py ModelBase.does_token_look_special: added tokens some models forget to
// mark special.
bool looks_special(const std::string& t) {
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || starts_ends(t, "<|", "|>") ||
         starts_ends(t, "<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || starts_ends(t, "<unused", ">");
}

std::string spaces_for_markers(std::string_view s) {
  std::string out;
  for (size_t p = 0; p < s.size();) {
    if (s.substr(p, kSpaceMarker.size()) == kSpaceMarker) {
      out += ' ';
      p += kSpaceMarker.size();
    } else {
      out += s[p++];
    }
  }
  return out;
}

}  // namespace

GgufTokenizerMeta gguf_vocab_from_sentencepiece(const std::string& dir, int64_t n_vocab, const std::string& gguf_arch,
                                                const json& tokenizer_json, const json& tokenizer_config) {
  const SentencePieceModel sp = read_sentencepiece_model((fs::path(dir) / "tokenizer.model").string());
  const bool phi3 = gguf_arch == "phi3";
  if (n_vocab <= 0) n_vocab = int64_t(sp.pieces.size());
  GgufTokenizerMeta m;
  m.model = "llama";
  m.pre = "default";
  m.tokens.resize(size_t(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) m.tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]";
  m.scores.assign(size_t(n_vocab), -10000.0f);
  m.token_type.assign(size_t(n_vocab), kUnused);
  // The piece count beyond vocab_size is dropped (the converter warns and stops there).
  for (size_t i = 0; i < sp.pieces.size() && int64_t(i) < n_vocab; ++i) {
    const SentencePieceModel::Piece& p = sp.pieces[i];
    m.tokens[i] = p.text;
    m.scores[i] = p.score;
    m.token_type[i] =
        (p.type == kUnknown || p.type == kControl || p.type == kUnused || p.type == kByte) ? p.type : kNormal;
  }
  auto set = [&](const json& idj, const std::string& text, int32_t type) {
    if (!idj.is_number_integer()) return;
    const int64_t id = idj.get<int64_t>();
    if (id < 0 || id >= n_vocab) return;  // the converter warns and skips these
    m.tokens[size_t(id)] = text;
    m.scores[size_t(id)] = -1000.0f;
    m.token_type[size_t(id)] = type;
  };
  const fs::path added_path = fs::path(dir) / "added_tokens.json";
  if (fs::exists(added_path)) {
    std::ifstream f(added_path, std::ios::binary);
    json added;
    try {
      added = json::parse(f);
    } catch (const json::exception& e) {
      user_error("{}: invalid JSON: {}", added_path.string(), e.what());
    }
    if (!added.is_object()) user_error("{}: not a JSON object", added_path.string());
    for (const auto& [text, id] : added.items()) set(id, text, kUserDefined);
  }
  if (tokenizer_config.is_object() && tokenizer_config.contains("added_tokens_decoder") &&
      tokenizer_config["added_tokens_decoder"].is_object()) {
    for (const auto& [key, a] : tokenizer_config["added_tokens_decoder"].items()) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string()) continue;
      std::string text = a["content"].get<std::string>();
      const bool special = a.value("special", false);
      int64_t id = -1;
      try {
        id = std::stoll(key);
      } catch (const std::exception&) {
        user_error("{}/tokenizer_config.json: added_tokens_decoder key '{}' is not an id", dir, key);
      }
      if (phi3) {
        set(id, text, special ? kControl : kUserDefined);
      } else if (special || looks_special(text)) {
        set(id, text, kControl);
      } else {
        set(id, spaces_for_markers(text), kUserDefined);
      }
    }
  }
  if (phi3 && tokenizer_json.is_object() && tokenizer_json.contains("added_tokens") &&
      tokenizer_json["added_tokens"].is_array())
    for (const json& a : tokenizer_json["added_tokens"])
      if (a.is_object() && a.contains("id") && a.contains("content") && a["content"].is_string())
        set(a["id"], a["content"].get<std::string>(), a.value("special", false) ? kControl : kUserDefined);
  return m;
}

}  // namespace qt::tok
