// The token table shared by all tokenizer kinds, llama.cpp's special-token partitioning, and the
// base class that turns (partition + per-fragment encoder + BOS/EOS) into qt::Tokenizer.
// Internal to formats/tokenizer.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/tokenizer/tokenizer.h"

namespace qt::tok {

// GGUF tokenizer.ggml.token_type values (llama.cpp LLAMA_TOKEN_TYPE_*).
enum TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

struct TokenInfo {
  std::string text;
  float score = 0.0f;
  int32_t type = kNormal;
  bool lstrip = false, rstrip = false;  // strip whitespace around the token when partitioning
  // llama.cpp adds the CONTROL attribute to end-of-generation-looking tokens ("<|endoftext|>",
  // "</s>", ...) that the file typed otherwise.
  bool forced_control = false;
  bool special() const { return type == kControl || type == kUnknown || forced_control; }
  // Matched whole in the raw text before pre-tokenization (llama.cpp's cache_special_tokens).
  bool partitioned() const { return special() || type == kUserDefined; }
};

struct StrHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StrHash, std::equal_to<>>;

struct Vocab {
  std::vector<TokenInfo> tokens;
  TokenMap ids;                   // text -> id
  std::vector<int32_t> specials;  // partitioned tokens, longest text first (ties: lower id first)

  int32_t find(std::string_view s) const {
    auto it = ids.find(s);
    return it == ids.end() ? -1 : it->second;
  }
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < size(); }
  // Builds `ids` and `specials` from `tokens`. Tokens of type kUnused with empty text (holes in
  // an HF id space) are not indexed. Duplicate texts are a UserError naming `where`.
  void build_index(const std::string& where);
};

struct Fragment {
  bool is_token;
  int32_t id;           // when is_token
  uint32_t begin, end;  // byte range of raw text otherwise
};

// llama.cpp tokenizer_st_partition: for each special token (longest first), split every raw
// fragment at its occurrences; control/unknown tokens only when parse_special, user-defined
// tokens always. Honors the lstrip/rstrip flags (C-locale isspace).
void partition_specials(const Vocab& v, std::string_view text, bool parse_special, std::vector<Fragment>* out);

// Everything about a tokenizer that is not the encoding algorithm.
struct TokenizerMeta {
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
  std::string chat_template;     // from GGUF tokenizer.chat_template (may be empty)
  int64_t model_max_length = 0;  // from GGUF <arch>.context_length (0 = unknown)
  std::string source;            // file it came from, for messages
  std::string hf_dir;            // the HF folder it was read from ("" otherwise)
  // When loaded from a HF folder: the files as read, re-emitted unchanged by the exporters.
  std::optional<nlohmann::json> hf_tokenizer_json, hf_tokenizer_config;
};

class TokenizerBase : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override { return vocab.size(); }
  int bos_id() const override { return meta.bos; }
  int eos_id() const override { return meta.eos; }
  bool add_bos() const override { return meta.add_bos; }
  bool add_eos() const override { return meta.add_eos; }
  std::string chat_template() const override { return meta.chat_template; }

  Vocab vocab;
  TokenizerMeta meta;

 protected:
  // Encodes one raw fragment (never empty). `after_special`: the fragment starts the text or
  // follows a special token (SentencePiece adds its space prefix there); `at_start`: it starts
  // the text (HF Metaspace prepend_scheme "first").
  virtual void encode_fragment(std::string_view text, bool after_special, bool at_start,
                               std::vector<int32_t>* out) const = 0;
  // The bytes a token stands for when decoding.
  virtual void append_piece(int32_t id, bool first, std::string* out) const = 0;
};

}  // namespace qt::tok
