// One Tokenizer interface for byte-level BPE (GPT-2 family, SmolLM2, Llama-3, Qwen2) and
// SentencePiece-style BPE with byte fallback (Llama-2, Mistral, Phi-3). docs/spec/tokenizer.md,
// docs/spec/gguf.md §Tokenizer keys.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace qt {

class GgufFile;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // add_special: prepend BOS / append EOS as the model's configuration says (add_bos/add_eos).
  // parse_special: also match control tokens (e.g. "<|im_start|>") written in the text; when false
  // (llama.cpp's default in llama-tokenize / llama-perplexity) they are tokenized as plain text.
  // User-defined added tokens are always matched whole, as in llama.cpp and HF tokenizers.
  // Never throws on any input bytes: invalid UTF-8 is read the way llama.cpp reads it (U+FFFD).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const = 0;
  // The text the ids stand for: control tokens are rendered as their text, no space clean-up.
  // UserError for an id outside [0, vocab_size()).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int vocab_size() const = 0;
  virtual std::string kind() const = 0;  // e.g. "bpe (smollm)", "spm"
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual bool add_bos() const = 0;
  virtual bool add_eos() const = 0;
  // The model's chat template (Jinja source; formats/tokenizer/chat_template.h), "" when it has none.
  virtual std::string chat_template() const = 0;
  // A HF tokenizer.json and tokenizer_config.json describing this tokenizer (for convert).
  virtual nlohmann::json to_hf_tokenizer_json() const = 0;
  virtual nlohmann::json to_hf_tokenizer_config() const = 0;
};

// The tokenizer.ggml.* metadata llama.cpp's llama_vocab::load reads, for the GGUF writer
// (formats/tokenizer/export_gguf.cpp). `scores` empty: not written (BPE), as convert_hf_to_gguf.
struct GgufTokenizerMeta {
  std::string model;  // "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;    // tokenizer.ggml.pre ("default" for "llama")
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> token_type;
  std::vector<std::string> merges;  // "left right"
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
  // convert_hf_to_gguf.py writes add_bos / add_eos only when the folder says (llama.cpp then
  // assumes its per-model default), add_sep when a pair template has one.
  bool write_add_bos = true, write_add_eos = true;
  int add_sep = -1;           // -1: not written; 0/1
  int add_space_prefix = -1;  // -1: not written; 0/1 (SentencePiece)
  std::string chat_template;
};
// What the vocabulary goes into: the config's vocab_size (0: the tokenizer's own size) and the
// GGUF architecture name, which picks convert_hf_to_gguf.py's per-model vocabulary rules.
struct GgufVocabTarget {
  int64_t n_vocab = 0;
  std::string gguf_arch;
};
// UserError when the tokenizer has no GGUF form llama.cpp would read the same way (a
// SentencePiece-style tokenizer.json without its tokenizer.model, a pre-tokenizer llama.cpp has
// no name for).
GgufTokenizerMeta tokenizer_to_gguf(const Tokenizer& t, const GgufVocabTarget& target = {});

// From GGUF metadata (tokenizer.ggml.*), as llama.cpp's llama_vocab::load reads it. UserError on
// a missing/ill-typed key or an unsupported tokenizer.ggml.model / tokenizer.ggml.pre.
std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& g);
// From a HF folder (tokenizer.json, plus tokenizer_config.json for BOS/EOS handling).
std::unique_ptr<Tokenizer> tokenizer_from_hf_dir(const std::string& dir);

}  // namespace qt
