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
#include <map>

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

namespace {

// A tokenizer_config.json token as gguf.SpecialVocab compares it: a string, or (an object) a
// value that equals no token name; "" when absent.
std::string config_token(const json& tc, const char* key) {
  if (!tc.is_object() || !tc.contains(key) || tc[key].is_null()) return "";
  return tc[key].is_string() ? tc[key].get<std::string>() : std::string("\x01(object)");
}

std::string special_id(const json& item) {
  if (!item.is_object() || !item.contains("SpecialToken") || !item["SpecialToken"].is_object()) return "";
  return item["SpecialToken"].value("id", "");
}

std::string sequence_id(const json& item) {
  if (!item.is_object() || !item.contains("Sequence") || !item["Sequence"].is_object()) return "";
  return item["Sequence"].value("id", "");
}

}  // namespace

// gguf-py/gguf/vocab.py SpecialVocab._try_load_from_tokenizer_json, the add_special_token part.
void special_vocab_add_flags(const json& tj, const json& tc, GgufTokenizerMeta* m) {
  std::map<std::string, bool> add;
  const bool have_tc = tc.is_object() && !tc.empty();
  std::string bos = config_token(tc, "bos_token"), cls = config_token(tc, "cls_token"),
              eos = config_token(tc, "eos_token"), sep = config_token(tc, "sep_token");
  if (bos.empty() && !cls.empty() && have_tc) bos = cls;
  if (eos.empty() && !sep.empty() && have_tc) eos = sep;
  const json pp = tj.is_object() ? tj.value("post_processor", json()) : json();
  if (pp.is_object() && !pp.empty()) {
    const json procs = pp.contains("processors") ? pp["processors"] : json::array({pp});
    for (const json& p : procs) {
      const std::string ty = p.is_object() ? p.value("type", "") : "";
      if (ty == "ByteLevel") {
        add.emplace("bos", false);
        add.emplace("eos", false);
      } else if (ty == "RobertaProcessing") {
        add["bos"] = add["eos"] = add["sep"] = true;
      } else if (ty == "TemplateProcessing") {
        const json single = p.value("single", json::array()), pair = p.value("pair", json::array());
        std::string first, last;
        if (single.size() > 1) {
          if (!(first = special_id(single.front())).empty()) {
            if (!have_tc) {
              bos = first;
            } else if (first != bos && first != cls) {
              if (bos.empty()) bos = first;
              if (cls.empty()) cls = first;
            }
            add["bos"] = first == bos || first == cls;
          }
          if (!(last = special_id(single.back())).empty()) {
            if (!have_tc || last != eos) eos = last;  // the converter moves the old EOS to EOT/EOM
            add["eos"] = true;
          }
        }
        if (!pair.empty()) {
          const size_t start = !first.empty() && special_id(pair.front()) == first ? 1 : 0;
          const size_t stop = !last.empty() && special_id(pair.back()) == last ? pair.size() - 1 : pair.size();
          if (start < stop && sequence_id(pair[start]) == "A" && sequence_id(pair[stop - 1]) == "B" &&
              stop - start > 2) {
            bool add_sep = false;
            const std::string e1 = special_id(pair[start + 1]);
            if (!e1.empty() && (e1 == sep || e1 == eos) && last.empty()) add_sep = true;
            if (stop - start == 4) {
              const std::string e2 = special_id(pair[start + 2]);
              if (!e2.empty() && (e2 == sep || e2 == eos)) add_sep = true;
            }
            add["sep"] = add_sep;
          }
        }
      }
    }
  }
  if (have_tc)
    for (const char* kind : {"bos", "eos", "unk", "sep", "pad", "cls", "mask"}) {
      const std::string key = std::string("add_") + kind + "_token";
      if (tc.contains(key) && tc[key].is_boolean()) add.emplace(kind, tc[key].get<bool>());
    }
  m->write_add_bos = add.count("bos") != 0;
  m->write_add_eos = add.count("eos") != 0;
  if (m->write_add_bos) m->add_bos = add["bos"];
  if (m->write_add_eos) m->add_eos = add["eos"];
  m->add_sep = add.count("sep") ? (add["sep"] ? 1 : 0) : -1;
}

}  // namespace qt::tok
