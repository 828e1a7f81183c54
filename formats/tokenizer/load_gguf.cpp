// Tokenizer from GGUF metadata, read the way llama.cpp's llama_vocab::impl::load reads it
// (src/llama-vocab.cpp): docs/spec/gguf.md §Tokenizer keys, §Pre-tokenizer ids.
#include <algorithm>
#include <cctype>

#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer/bpe.h"
#include "formats/tokenizer/spm.h"
#include "formats/tokenizer/tokenizer.h"

namespace qt {

namespace {

using tok::TokenInfo;

// Texts llama.cpp puts in its end-of-generation set and types CONTROL when the file did not.
constexpr const char* kEogTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81"
    "of\xE2\x96\x81"
    "sentence\xEF\xBD\x9C>",
    "[e~[",
};

void read_vocab(const GgufFile& g, tok::Vocab* v) {
  const std::string& src = g.path();
  const auto& texts = g.get_string_array("tokenizer.ggml.tokens");
  const size_t n = texts.size();
  if (n == 0) user_error("{}: tokenizer.ggml.tokens is empty", src);
  if (n > size_t(INT32_MAX / 2)) user_error("{}: tokenizer.ggml.tokens has {} entries", src, n);

  std::vector<double> scores;
  if (g.has("tokenizer.ggml.scores")) {
    const GgufValue& sv = g.metadata().at("tokenizer.ggml.scores");
    if (sv.type == GgufValueType::ARRAY && sv.elem_type == GgufValueType::FLOAT32) {
      scores = sv.af;
    } else if (sv.type == GgufValueType::ARRAY && sv.elem_type == GgufValueType::INT32) {
      scores.assign(sv.ai.begin(), sv.ai.end());
    } else {
      user_error("{}: tokenizer.ggml.scores must be an array of FLOAT32 or INT32", src);
    }
    if (scores.size() < n) user_error("{}: tokenizer.ggml.scores has {} entries for {} tokens", src, scores.size(), n);
  }
  const std::vector<int64_t>* types = nullptr;
  if (g.has("tokenizer.ggml.token_type")) {
    types = &g.get_int_array("tokenizer.ggml.token_type");
    if (types->size() < n)
      user_error("{}: tokenizer.ggml.token_type has {} entries for {} tokens", src, types->size(), n);
  }
  v->tokens.resize(n);
  for (size_t i = 0; i < n; ++i) {
    TokenInfo& t = v->tokens[i];
    t.text = texts[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : texts[i];
    t.score = scores.empty() ? 0.0f : static_cast<float>(scores[i]);
    if (types) {
      const int64_t ty = (*types)[i];
      t.type = (ty >= tok::kNormal && ty <= tok::kByte) ? static_cast<int32_t>(ty) : tok::kUndefined;
    }
  }
}

// Special ids: llama.cpp's defaults per model, replaced by the file's keys when in range.
void read_special_ids(const GgufFile& g, int32_t n_tokens, tok::TokenizerMeta* m) {
  auto read = [&](const char* key, int32_t* id) {
    if (*id >= n_tokens) *id = -1;
    if (!g.has(key)) return;
    const int64_t v = g.get_int(key);
    if (v >= 0 && v < n_tokens) *id = static_cast<int32_t>(v);
  };
  read("tokenizer.ggml.bos_token_id", &m->bos);
  read("tokenizer.ggml.eos_token_id", &m->eos);
  read("tokenizer.ggml.unknown_token_id", &m->unk);
  read("tokenizer.ggml.padding_token_id", &m->pad);
  m->add_bos = g.get_bool_or("tokenizer.ggml.add_bos_token", m->add_bos);
  m->add_eos = g.get_bool_or("tokenizer.ggml.add_eos_token", m->add_eos);
  m->chat_template = g.get_string_or("tokenizer.chat_template", "");
  const std::string arch = g.get_string_or("general.architecture", "");
  if (!arch.empty() && g.has(arch + ".context_length")) m->model_max_length = g.get_int(arch + ".context_length");
}

void mark_eog_tokens(tok::Vocab* v) {
  for (const char* s : kEogTexts) {
    for (int32_t i = 0; i < v->size(); ++i) {
      TokenInfo& t = v->tokens[i];
      if (t.text == s && t.type != tok::kControl) t.forced_control = true;
    }
  }
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& g) {
  const std::string& src = g.path();
  const std::string model = g.get_string("tokenizer.ggml.model");

  if (model == "gpt2") {
    auto t = std::make_unique<tok::BpeTokenizer>();
    t->meta.source = src;
    read_vocab(g, &t->vocab);
    const std::string pre = g.get_string_or("tokenizer.ggml.pre", "");
    tok::PreTokenizerSpec spec;
    if (!tok::pre_tokenizer_for_gguf(pre, &spec)) user_error("{}: tokenizer.ggml.pre '{}' is not supported", src, pre);
    t->regexes = spec.regexes;
    t->pre_name = spec.name;
    t->pre_family = spec.family;
    t->ignore_merges = spec.ignore_merges;
    t->byte_level = true;
    if (!g.has("tokenizer.ggml.merges")) user_error("{}: cannot find tokenizer.ggml.merges", src);
    const auto& merges = g.get_string_array("tokenizer.ggml.merges");
    t->merges.reserve(merges.size());
    for (const std::string& m : merges) {
      // llama.cpp splits at the first space after the first byte (a left part may start with one).
      const size_t pos = m.find(' ', 1);
      if (pos == std::string::npos) {
        t->merges.emplace_back();  // keeps the ranks of the following merges
        continue;
      }
      t->merges.emplace_back(m.substr(0, pos), m.substr(pos + 1));
    }
    t->meta.bos = 11;  // llama.cpp's BPE defaults
    t->meta.eos = 11;
    t->meta.add_bos = spec.add_bos;
    read_special_ids(g, t->vocab.size(), &t->meta);
    mark_eog_tokens(&t->vocab);
    t->vocab.build_index(src);
    t->finalize();
    return t;
  }

  if (model == "llama") {
    auto t = std::make_unique<tok::SpmTokenizer>();
    t->meta.source = src;
    read_vocab(g, &t->vocab);
    t->meta.bos = 1;
    t->meta.eos = 2;
    t->meta.unk = 0;
    t->meta.add_bos = true;
    t->add_space_prefix = g.get_bool_or("tokenizer.ggml.add_space_prefix", true);
    read_special_ids(g, t->vocab.size(), &t->meta);
    mark_eog_tokens(&t->vocab);
    t->general_name = g.get_string_or("general.name", "");
    // llama.cpp (per-token attributes "by model name"): Phi-3 strips the whitespace after its
    // special tokens, except after <unk>, <s> and <|endoftext|>.
    std::string name = t->general_name;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
      for (TokenInfo& ti : t->vocab.tokens) {
        if (ti.partitioned() || ti.text == "</s>") ti.rstrip = true;
        if (ti.text == "<unk>" || ti.text == "<s>" || ti.text == "<|endoftext|>") ti.rstrip = false;
      }
    }
    t->vocab.build_index(src);
    t->finalize();
    return t;
  }

  user_error("{}: tokenizer.ggml.model '{}' is not supported (supported: gpt2, llama)", src, model);
}

}  // namespace qt
