// Merge-rank BPE: byte-level (GPT-2 family, SmolLM2, Llama-3, Qwen2; llama.cpp's
// llm_tokenizer_bpe_session, HF `BPE` + `ByteLevel`) and the SentencePiece-style variant of HF
// tokenizer.json files (raw UTF-8 with '▁' for spaces, `<0xXX>` byte fallback; Llama-2, Mistral).
// Internal to formats/tokenizer.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/tokenizer/pretokenize.h"
#include "formats/tokenizer/vocab.h"

namespace qt::tok {

// (left id, right id) -> (rank, merged id). Ids >= vocab size name strings that occur in the merge
// list but are not tokens (llama.cpp merges by string, so such merges still take part).
class MergeTable {
 public:
  void reserve(size_t n);
  void add(int32_t left, int32_t right, int32_t rank, int32_t merged);
  // Returns the rank (or -1 when the pair does not merge) and sets *merged.
  int32_t find(int32_t left, int32_t right, int32_t* merged) const;
  size_t size() const { return count_; }

 private:
  struct Slot {
    uint64_t key;  // (left << 32 | right) + 1; 0 = empty
    int32_t rank, merged;
  };
  std::vector<Slot> slots_;
  size_t count_ = 0;
  size_t mask_ = 0;
  void grow();
};

class BpeTokenizer : public TokenizerBase {
 public:
  // --- configuration (set by the loaders, then call finalize()) ---
  bool byte_level = true;      // GPT-2 byte alphabet; false: raw UTF-8 pieces ('▁' for space)
  bool ignore_merges = false;  // a pre-token that is a whole vocab entry is emitted as is
  bool byte_fallback = false;  // unknown character -> <0xXX> tokens
  bool fuse_unk = false;
  // SentencePiece-style normalisation of each fragment (byte_level == false only).
  bool replace_spaces = false;                                               // ' ' -> '▁'
  enum class Prepend { kNever, kAlways, kFirst } prepend = Prepend::kNever;  // add a leading '▁'
  bool prepend_if_missing = false;   // HF Metaspace: only when the text does not start with '▁'
  bool add_prefix_space = false;     // byte-level: HF ByteLevel(add_prefix_space)
  std::vector<std::string> regexes;  // pre-tokenizer regex sequence (HF spelling)
  std::string pre_name;              // GGUF tokenizer.ggml.pre as given ("" for HF)
  std::string pre_family;            // canonical family (pretokenize.h), "" when from HF
  // Merges as (left text, right text) in rank order, as the source listed them.
  std::vector<std::pair<std::string, std::string>> merges;

  // Builds the merge table, the regex splitter and the byte-token map. UserError on bad regexes.
  void finalize();

  std::string kind() const override;
  nlohmann::json to_hf_tokenizer_json() const override;
  nlohmann::json to_hf_tokenizer_config() const override;

 protected:
  void encode_fragment(std::string_view text, bool after_special, bool at_start,
                       std::vector<int32_t>* out) const override;
  void append_piece(int32_t id, bool first, std::string* out) const override;

 private:
  struct Sym {
    int32_t id;           // token id, id >= vocab size for merge-only strings, -1 if unknown
    uint32_t begin, end;  // bytes of the word
  };
  int32_t lookup_symbol(std::string_view s) const;
  void bpe_word(std::string_view word, std::vector<int32_t>* out) const;
  void merge_small(std::vector<Sym>& syms) const;
  void merge_large(std::vector<Sym>& syms) const;
  void emit(std::string_view word, const std::vector<Sym>& syms, std::vector<int32_t>* out) const;

  MergeTable table_;
  std::vector<std::string> extra_;  // merge-only strings, id = vocab size + index
  TokenMap extra_ids_;
  std::unique_ptr<RegexSplitter> splitter_;
  int32_t byte_tokens_[256];
};

}  // namespace qt::tok
