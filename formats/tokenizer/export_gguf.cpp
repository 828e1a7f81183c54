// tokenizer.ggml.* for the GGUF writer: what convert_hf_to_gguf.py writes for the tokenizer
// (get_vocab_base for byte-level BPE, the SentencePiece vocab for `llama`), so that llama.cpp's
// llama_vocab::load reads back the tokenizer we encode with.
//  - Byte-level BPE: model "gpt2", the token texts, token types (added special tokens CONTROL,
//    other added tokens USER_DEFINED, the rest NORMAL), merges "left right" in rank order, and
//    tokenizer.ggml.pre. A GGUF source keeps its pre name; for a tokenizer.json the name is the
//    llama.cpp family whose regexes are the file's pre-tokenizer (convert_hf_to_gguf.py finds it
//    by hashing a tokenization instead; the regex list is what that hash stands for).
//  - SentencePiece (a GGUF `llama` source): tokens, scores, types and add_space_prefix as read,
//    pre "default".
//  - A SentencePiece-style tokenizer.json (byte fallback, '▁' for spaces): llama.cpp's converter
//    reads the tokenizer.model beside it (export_gguf_spm.cpp), so do we. Special ids: the
//    tokenizer files' (load_hf.cpp), else config.json's, as gguf.SpecialVocab falls back; add_bos /
//    add_eos / add_sep only where SpecialVocab decides them; the chat template from
//    tokenizer_config.json; add_space_prefix as the architecture's set_vocab writes it. Without tokenizer.model
//    the converter falls back to LlamaHfVocab, which scores every token -1000: llama.cpp's
//    score-driven merging would then not tokenize as tokenizer.json does, so that case is refused.
#include <filesystem>
#include <fstream>

#include "formats/error.h"
#include "formats/tokenizer/bpe.h"
#include "formats/tokenizer/sentencepiece_model.h"
#include "formats/tokenizer/spm.h"
#include "formats/tokenizer/tokenizer.h"

namespace qt {

namespace {

// The llama.cpp pre-tokenizer name for a tokenizer.json's regex list (HF spelling, as
// load_hf.cpp collects it), or "" when none of the supported families has that list.
std::string pre_name_for_hf(const tok::BpeTokenizer& t) {
  if (t.add_prefix_space) return "";
  using V = std::vector<std::string>;
  const V& r = t.regexes;
  if (r == V{tok::re::kGpt2}) return "gpt-2";
  if (r == V{tok::re::kDigit, tok::re::kGpt2}) return "smollm";  // Digits(individual) + ByteLevel
  if (r == V{tok::re::kLlama3}) return "llama-bpe";
  if (r == V{tok::re::kQwen2}) return "qwen2";
  return "";
}

void specials(const tok::TokenizerBase& b, GgufTokenizerMeta* m) {
  const int32_t n = int32_t(m->tokens.size());
  auto in_range = [n](int32_t id) { return id < n ? id : -1; };  // gguf.SpecialVocab drops the others
  m->bos = in_range(b.meta.bos), m->eos = in_range(b.meta.eos), m->unk = in_range(b.meta.unk),
  m->pad = in_range(b.meta.pad);
  m->add_bos = b.meta.add_bos, m->add_eos = b.meta.add_eos;
  m->chat_template = b.meta.chat_template;
}

// gguf.SpecialVocab._try_load_from_config_json: an id the tokenizer files left unset comes from
// config.json's <kind>_token_id (or its text_config's), when in range.
void config_special_ids(const std::string& dir, GgufTokenizerMeta* m) {
  const std::filesystem::path p = std::filesystem::path(dir) / "config.json";
  std::ifstream f(p, std::ios::binary);
  if (!f) return;
  const nlohmann::json c = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!c.is_object()) return;
  const int32_t n = int32_t(m->tokens.size());
  for (auto [kind, id] :
       {std::pair<const char*, int32_t*>{"bos", &m->bos}, {"eos", &m->eos}, {"unk", &m->unk}, {"pad", &m->pad}}) {
    if (*id >= 0) continue;
    const std::string key = std::string(kind) + "_token_id";
    const nlohmann::json* v = c.contains(key) ? &c[key] : nullptr;
    if ((!v || v->is_null()) && c.contains("text_config") && c["text_config"].is_object() &&
        c["text_config"].contains(key))
      v = &c["text_config"][key];
    if (v && v->is_number_integer() && v->get<int64_t>() >= 0 && v->get<int64_t>() < n) *id = v->get<int32_t>();
  }
}

GgufTokenizerMeta sentencepiece_json_to_gguf(const tok::BpeTokenizer& b, const GgufVocabTarget& target) {
  namespace fs = std::filesystem;
  if (b.meta.hf_dir.empty() || !fs::exists(fs::path(b.meta.hf_dir) / "tokenizer.model"))
    user_error(
        "{}: a SentencePiece-style tokenizer.json is written to GGUF from the tokenizer.model beside it, "
        "and there is none",
        b.meta.source);
  const nlohmann::json none;
  const nlohmann::json& tj = b.meta.hf_tokenizer_json ? *b.meta.hf_tokenizer_json : none;
  const nlohmann::json& tc = b.meta.hf_tokenizer_config ? *b.meta.hf_tokenizer_config : none;
  GgufTokenizerMeta m = tok::gguf_vocab_from_sentencepiece(b.meta.hf_dir, target.n_vocab, target.gguf_arch, tj, tc);
  specials(b, &m);
  config_special_ids(b.meta.hf_dir, &m);
  tok::special_vocab_add_flags(tj, tc, &m);
  if (target.gguf_arch == "gemma2" || target.gguf_arch == "gemma3") {
    m.add_space_prefix = 0;  // Gemma2Model / Gemma3Model.set_vocab
  } else if (target.gguf_arch == "llama" && tc.is_object() && tc.contains("add_prefix_space") &&
             tc["add_prefix_space"].is_boolean()) {
    m.add_space_prefix = tc["add_prefix_space"].get<bool>() ? 1 : 0;  // LlamaModel.set_vocab
  }
  return m;
}

void common(const tok::TokenizerBase& b, GgufTokenizerMeta* m) {
  m->tokens.reserve(size_t(b.vocab.size()));
  m->token_type.reserve(size_t(b.vocab.size()));
  for (int32_t i = 0; i < b.vocab.size(); ++i) {
    const tok::TokenInfo& ti = b.vocab.tokens[size_t(i)];
    if (ti.type == tok::kUnused && ti.text.empty()) {  // a hole in an HF id space
      m->tokens.push_back("[PAD" + std::to_string(i) + "]");
      m->token_type.push_back(tok::kUnused);
      continue;
    }
    m->tokens.push_back(ti.text);
    m->token_type.push_back(ti.type == tok::kUndefined ? tok::kNormal : ti.type);
  }
  specials(b, m);
}

}  // namespace

GgufTokenizerMeta tokenizer_to_gguf(const Tokenizer& t, const GgufVocabTarget& target) {
  GgufTokenizerMeta m;
  if (auto* b = dynamic_cast<const tok::BpeTokenizer*>(&t)) {
    if (!b->byte_level) return sentencepiece_json_to_gguf(*b, target);
    m.model = "gpt2";
    m.pre = b->pre_name.empty() ? pre_name_for_hf(*b) : b->pre_name;
    if (m.pre.empty())
      user_error("{}: its pre-tokenizer matches none llama.cpp names here (gpt-2, smollm, llama-bpe, qwen2)",
                 b->meta.source);
    common(*b, &m);
    m.merges.reserve(b->merges.size());
    for (auto& [l, r] : b->merges) m.merges.push_back(l + " " + r);
    return m;
  }
  if (auto* s = dynamic_cast<const tok::SpmTokenizer*>(&t)) {
    m.model = "llama";
    m.pre = "default";  // convert_hf_to_gguf.py writes it for SentencePiece models too (llama.cpp ignores it)
    common(*s, &m);
    m.scores.reserve(size_t(s->vocab.size()));
    for (auto& ti : s->vocab.tokens) m.scores.push_back(ti.score);
    m.add_space_prefix = s->add_space_prefix ? 1 : 0;
    return m;
  }
  user_error("tokenizer '{}' cannot be written to GGUF", t.kind());
}

}  // namespace qt
