// Tokenizer from a Hugging Face folder: tokenizer.json (huggingface/tokenizers serialization,
// docs/spec/tokenizer.md) plus tokenizer_config.json for BOS/EOS handling. Supported: model "BPE" with
//   - byte-level pre-tokenization: ByteLevel, Split(Regex|String, Isolated), Digits, in a Sequence
//     (GPT-2, SmolLM2, StarCoder, Llama-3, Qwen2), or
//   - SentencePiece style: normalizer Prepend("▁")+Replace(" ","▁") (Llama-2 legacy) or a
//     Metaspace pre-tokenizer (Mistral, non-legacy Llama), with byte_fallback.
// Anything else is refused with a message naming the component. Not applied: the NFC normalizer
// of Qwen2 (llama.cpp does not apply it either; text that is already NFC is unaffected), and the
// added-token flags single_word / normalized (lstrip / rstrip are honoured). Added tokens marked
// special behave like llama.cpp's control tokens (matched only with parse_special), the others
// like user-defined tokens (always matched).
#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/error.h"
#include "formats/tokenizer/bpe.h"
#include "formats/tokenizer/pretokenize.h"
#include "formats/tokenizer/tokenizer.h"
#include "formats/tokenizer/unicode.h"

namespace qt {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) user_error("{}: cannot open", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    user_error("{}: invalid JSON: {}", p.string(), e.what());
  }
}

// Escapes a literal string for use inside a PCRE2 pattern.
std::string regex_quote(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

struct Ctx {
  std::string where;  // "DIR/tokenizer.json"
  [[noreturn]] void fail(const std::string& what) const { user_error("{}: {}", where, what); }
};

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

// Collects the pre-tokenizer into the BPE tokenizer's settings.
void read_pre_tokenizer(const Ctx& c, const json& pt, tok::BpeTokenizer* t, bool* saw_byte_level) {
  if (pt.is_null()) return;
  const std::string ty = type_of(pt);
  if (ty == "Sequence") {
    if (!pt.contains("pretokenizers") || !pt["pretokenizers"].is_array())
      c.fail("pre_tokenizer Sequence without a list");
    for (const json& p : pt["pretokenizers"]) read_pre_tokenizer(c, p, t, saw_byte_level);
    return;
  }
  if (*saw_byte_level) c.fail("pre_tokenizer: '" + ty + "' after ByteLevel is not supported");
  if (ty == "ByteLevel") {
    *saw_byte_level = true;
    t->byte_level = true;
    // HF adds the prefix space to every piece split off so far; we can add it to a whole
    // fragment only, i.e. when ByteLevel is the first pre-tokenizer.
    if (pt.value("add_prefix_space", false)) {
      if (!t->regexes.empty())
        c.fail("pre_tokenizer: ByteLevel add_prefix_space after another pre-tokenizer is not supported");
      t->add_prefix_space = true;
    }
    if (pt.value("use_regex", true)) t->regexes.push_back(tok::re::kGpt2);
    return;
  }
  if (ty == "Digits") {
    t->regexes.push_back(pt.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    return;
  }
  if (ty == "Split") {
    const json& pat = pt.value("pattern", json());
    const std::string behavior = pt.value("behavior", "");
    if (behavior != "Isolated")
      c.fail("pre_tokenizer Split with behavior '" + behavior + "' is not supported (only Isolated)");
    if (pt.value("invert", false)) c.fail("pre_tokenizer Split with invert is not supported");
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      t->regexes.push_back(pat["Regex"].get<std::string>());
    } else if (pat.contains("String") && pat["String"].is_string()) {
      t->regexes.push_back(regex_quote(pat["String"].get<std::string>()));
    } else {
      c.fail("pre_tokenizer Split without a Regex or String pattern");
    }
    return;
  }
  if (ty == "Metaspace") {
    const std::string rep = pt.value("replacement", std::string(tok::kSpaceMarker));
    if (rep != tok::kSpaceMarker) c.fail("pre_tokenizer Metaspace with replacement '" + rep + "' is not supported");
    t->byte_level = false;
    t->replace_spaces = true;
    t->prepend_if_missing = true;
    std::string scheme = pt.value("prepend_scheme", "");
    if (scheme.empty()) scheme = pt.value("add_prefix_space", true) ? "always" : "never";
    t->prepend = scheme == "always"  ? tok::BpeTokenizer::Prepend::kAlways
                 : scheme == "first" ? tok::BpeTokenizer::Prepend::kFirst
                                     : tok::BpeTokenizer::Prepend::kNever;
    if (pt.value("split", true)) t->regexes.push_back("\xE2\x96\x81[^\xE2\x96\x81]*|[^\xE2\x96\x81]+");
    return;
  }
  c.fail("pre_tokenizer '" + ty + "' is not supported");
}

void read_normalizer(const Ctx& c, const json& n, tok::BpeTokenizer* t) {
  if (n.is_null()) return;
  const std::string ty = type_of(n);
  if (ty == "Sequence") {
    for (const json& x : n.value("normalizers", json::array())) read_normalizer(c, x, t);
    return;
  }
  if (ty == "NFC") return;  // not applied: see the top of this file
  if (ty == "Prepend" && n.value("prepend", "") == tok::kSpaceMarker) {
    t->byte_level = false;
    t->prepend = tok::BpeTokenizer::Prepend::kAlways;
    return;
  }
  if (ty == "Replace") {
    const json& pat = n.value("pattern", json());
    if (pat.value("String", "") == " " && n.value("content", "") == tok::kSpaceMarker) {
      t->byte_level = false;
      t->replace_spaces = true;
      return;
    }
  }
  c.fail("normalizer '" + ty + "' is not supported");
}

// BOS/EOS from a TemplateProcessing post-processor ("single": [SpecialToken?, Sequence, SpecialToken?]).
void read_post_processor(const json& pp, const tok::Vocab& v, tok::TokenizerMeta* m) {
  if (pp.is_null()) return;
  const std::string ty = type_of(pp);
  if (ty == "Sequence") {
    for (const json& x : pp.value("processors", json::array())) read_post_processor(x, v, m);
    return;
  }
  if (ty != "TemplateProcessing" || !pp.contains("single") || !pp["single"].is_array()) return;
  const json& single = pp["single"];
  auto special_id = [&](const json& item) -> int32_t {
    if (!item.is_object() || !item.contains("SpecialToken")) return -1;
    const std::string name = item["SpecialToken"].value("id", "");
    if (pp.contains("special_tokens") && pp["special_tokens"].contains(name)) {
      const json& ids = pp["special_tokens"][name].value("ids", json::array());
      if (ids.size() == 1 && ids[0].is_number_integer()) return ids[0].get<int32_t>();
    }
    return v.find(name);
  };
  if (!single.empty()) {
    if (int32_t id = special_id(single.front()); id >= 0) {
      m->add_bos = true;
      m->bos = id;
    }
    if (single.size() > 1)
      if (int32_t id = special_id(single.back()); id >= 0) {
        m->add_eos = true;
        m->eos = id;
      }
  }
}

// tokenizer_config.json spells tokens as "text" or {"content": "text", ...}.
std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

std::unique_ptr<Tokenizer> load_tokenizer_dir(const std::string& dir) {
  const fs::path tj_path = fs::path(dir) / "tokenizer.json";
  const Ctx c{tj_path.string()};
  if (!fs::exists(tj_path)) c.fail("no such file");
  json tj = read_json(tj_path);
  json tc;
  const fs::path tc_path = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(tc_path)) tc = read_json(tc_path);
  if (!tj.is_object()) c.fail("not a JSON object");

  const json& model = tj.value("model", json());
  if (type_of(model) != "BPE" && !(model.is_object() && !model.contains("type") && model.contains("merges")))
    c.fail("model type '" + type_of(model) + "' is not supported (only BPE)");
  if (!model.contains("vocab") || !model["vocab"].is_object()) c.fail("model.vocab missing");

  auto t = std::make_unique<tok::BpeTokenizer>();
  t->meta.source = c.where;
  t->meta.hf_dir = dir;
  t->byte_level = false;

  // Token table: the model vocabulary plus added tokens (which may lie beyond it, e.g. Llama-3).
  std::vector<std::pair<std::string, int64_t>> entries;
  int64_t max_id = -1;
  for (const auto& [text, idj] : model["vocab"].items()) {
    if (!idj.is_number_integer()) c.fail("model.vocab['" + text + "'] is not an integer id");
    const int64_t id = idj.get<int64_t>();
    if (id < 0 || id > 16 * 1024 * 1024) c.fail("model.vocab id " + std::to_string(id) + " out of range");
    entries.emplace_back(text, id);
    max_id = std::max(max_id, id);
  }
  const json added = tj.value("added_tokens", json::array());
  for (const json& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
        !a["content"].is_string())
      c.fail("added_tokens entry without id/content");
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0 || id > 16 * 1024 * 1024) c.fail("added token id " + std::to_string(id) + " out of range");
    max_id = std::max(max_id, id);
  }
  t->vocab.tokens.assign(size_t(max_id + 1), tok::TokenInfo{"", 0.0f, tok::kUnused});
  for (auto& [text, id] : entries) {
    tok::TokenInfo& ti = t->vocab.tokens[size_t(id)];
    if (!ti.text.empty() && ti.text != text) c.fail("model.vocab gives id " + std::to_string(id) + " twice");
    ti.text = text;
    ti.type = tok::parse_byte_token(text) >= 0 ? tok::kByte : tok::kNormal;
  }
  for (const json& a : added) {
    tok::TokenInfo& ti = t->vocab.tokens[size_t(a["id"].get<int64_t>())];
    ti.text = a["content"].get<std::string>();
    ti.type = a.value("special", false) ? tok::kControl : tok::kUserDefined;
    ti.lstrip = a.value("lstrip", false);
    ti.rstrip = a.value("rstrip", false);
  }
  // A text must name one id; HF lets an added token repeat a vocab entry with the same id only.
  t->vocab.build_index(c.where);

  // Merges: ["a b", ...] (legacy) or [["a", "b"], ...].
  for (const json& m : model.value("merges", json::array())) {
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      if (s.rfind("#version", 0) == 0) continue;
      const size_t pos = s.find(' ');
      if (pos == std::string::npos || s.find(' ', pos + 1) != std::string::npos) c.fail("bad merge '" + s + "'");
      t->merges.emplace_back(s.substr(0, pos), s.substr(pos + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      t->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      c.fail("bad merge entry " + m.dump());
    }
  }
  if (model.value("dropout", json()).is_number() && model["dropout"].get<double>() > 0)
    c.fail("BPE dropout is not supported");
  if (!model.value("continuing_subword_prefix", json()).is_null() ||
      !model.value("end_of_word_suffix", json()).is_null())
    c.fail("BPE continuing_subword_prefix / end_of_word_suffix are not supported");
  t->ignore_merges = model.value("ignore_merges", false);
  t->byte_fallback = model.value("byte_fallback", false);
  t->fuse_unk = model.value("fuse_unk", false);
  if (model.contains("unk_token") && model["unk_token"].is_string())
    t->meta.unk = t->vocab.find(model["unk_token"].get<std::string>());

  bool saw_byte_level = false;
  read_normalizer(c, tj.value("normalizer", json()), t.get());
  read_pre_tokenizer(c, tj.value("pre_tokenizer", json()), t.get(), &saw_byte_level);
  if (saw_byte_level && (t->replace_spaces || t->prepend != tok::BpeTokenizer::Prepend::kNever))
    c.fail("mixes ByteLevel with SentencePiece-style space handling");
  if (!saw_byte_level && !t->replace_spaces && type_of(tj.value("decoder", json())) == "ByteLevel") {
    // A byte-level model whose file lists no pre-tokenizer (splits nothing, maps bytes).
    t->byte_level = true;
  } else if (!saw_byte_level && !t->replace_spaces && t->prepend == tok::BpeTokenizer::Prepend::kNever) {
    c.fail("neither a ByteLevel pre-tokenizer nor SentencePiece-style space handling");
  }
  if (t->byte_level)  // "<0x0A>" in a byte-level vocabulary is an ordinary string
    for (tok::TokenInfo& ti : t->vocab.tokens)
      if (ti.type == tok::kByte) ti.type = tok::kNormal;

  read_post_processor(tj.value("post_processor", json()), t->vocab, &t->meta);
  if (tc.is_object()) {
    if (tc.contains("bos_token")) {
      const int32_t id = t->vocab.find(token_text(tc["bos_token"]));
      if (id >= 0) t->meta.bos = id;
    }
    if (tc.contains("eos_token")) {
      const int32_t id = t->vocab.find(token_text(tc["eos_token"]));
      if (id >= 0) t->meta.eos = id;
    }
    if (tc.contains("unk_token") && t->meta.unk < 0) t->meta.unk = t->vocab.find(token_text(tc["unk_token"]));
    if (tc.contains("pad_token")) t->meta.pad = t->vocab.find(token_text(tc["pad_token"]));
    if (tc.contains("add_bos_token") && tc["add_bos_token"].is_boolean())
      t->meta.add_bos = tc["add_bos_token"].get<bool>();
    if (tc.contains("add_eos_token") && tc["add_eos_token"].is_boolean())
      t->meta.add_eos = tc["add_eos_token"].get<bool>();
    if (tc.contains("chat_template") && tc["chat_template"].is_string())
      t->meta.chat_template = tc["chat_template"].get<std::string>();
    if (tc.contains("model_max_length") && tc["model_max_length"].is_number_integer())
      t->meta.model_max_length = tc["model_max_length"].get<int64_t>();
  }
  if (t->meta.add_bos && t->meta.bos < 0) t->meta.add_bos = false;
  if (t->meta.add_eos && t->meta.eos < 0) t->meta.add_eos = false;

  t->meta.hf_tokenizer_json = std::move(tj);
  if (tc.is_object()) t->meta.hf_tokenizer_config = std::move(tc);
  t->finalize();
  return t;
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_hf_dir(const std::string& dir) {
  try {
    return load_tokenizer_dir(dir);
  } catch (const nlohmann::json::exception& e) {  // a field of an unexpected JSON type
    user_error("{}: unexpected tokenizer.json / tokenizer_config.json content: {}", dir, e.what());
  }
}

}  // namespace qt
