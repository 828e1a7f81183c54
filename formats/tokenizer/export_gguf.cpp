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
#include "formats/error.h"
#include "formats/tokenizer/bpe.h"
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
  m->bos = b.meta.bos, m->eos = b.meta.eos, m->unk = b.meta.unk, m->pad = b.meta.pad;
  m->add_bos = b.meta.add_bos, m->add_eos = b.meta.add_eos;
  m->chat_template = b.meta.chat_template;
}

}  // namespace

GgufTokenizerMeta tokenizer_to_gguf(const Tokenizer& t) {
  GgufTokenizerMeta m;
  if (auto* b = dynamic_cast<const tok::BpeTokenizer*>(&t)) {
    if (!b->byte_level)
      user_error(
          "{}: a SentencePiece-style tokenizer.json cannot be written to GGUF yet (convert from "
          "a GGUF of the model, or use a byte-level BPE model)",
          b->meta.source);
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
