// Pre-tokenization: split text into words with a sequence of Unicode regexes (PCRE2, UTF + UCP,
// JIT-compiled). Each regex is applied to every piece the previous one produced; both the matches
// and the unmatched stretches between them become pieces ("Isolated" in HF terms). This is what
// llama.cpp's unicode_regex_split does with its per-`tokenizer.ggml.pre` regex lists, and what an
// HF `Sequence[Split(..., Isolated), Digits, ByteLevel(use_regex)]` pre-tokenizer does.
//
// Patterns are written in the HF/Oniguruma flavour the tokenizer.json files use. Before compiling,
// `\s` / `\S` are replaced by the Unicode White_Space set that llama.cpp (unicode_set_whitespace)
// and Oniguruma use; PCRE2 10.42's UCP `\s` lacks U+0085.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qt::tok {

struct Piece {
  uint32_t begin, end;  // byte offsets into the split text
};

class RegexSplitter {
 public:
  // Throws UserError("{where}: bad pre-tokenizer regex ...") when a pattern does not compile.
  RegexSplitter(std::vector<std::string> patterns, const std::string& where);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // `text` must be valid UTF-8 (see sanitize_utf8). Appends the pieces in order; they cover the
  // text exactly. An empty pattern list gives one piece (the whole text, if non-empty).
  void split(std::string_view text, std::vector<Piece>* out) const;

  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  struct Compiled;
  std::vector<std::string> patterns_;
  std::vector<std::unique_ptr<Compiled>> compiled_;
};

// `\s`, `\S` rewritten to explicit White_Space classes (exposed for tests).
std::string expand_whitespace_classes(std::string_view pattern);

// Common regexes, in HF spelling (docs/spec/tokenizer.md §Regexes).
namespace re {
// GPT-2 as HF ByteLevel(use_regex) applies it (with the final `|\s+`).
inline constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// llama.cpp's GPT-2 list entry (without `|\s+`; the lone whitespace it leaves is its own piece
// anyway, so both split identically).
inline constexpr const char* kGpt2LlamaCpp =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
inline constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// llama.cpp's rewrite of the case-insensitive contractions (ASCII case only).
inline constexpr const char* kLlama3LlamaCpp =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kQwen2LlamaCpp =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kDigit = R"(\p{N})";
}  // namespace re

// The regex list llama.cpp applies for a `tokenizer.ggml.pre` value (src/llama-vocab.cpp,
// llm_tokenizer_bpe), plus the loader flags that value sets. Returns false for an unknown value.
struct PreTokenizerSpec {
  std::string name;                  // the value as given ("default" when missing)
  std::string family;                // canonical family ("gpt-2", "smollm", "llama-bpe", "qwen2", ...)
  std::vector<std::string> regexes;  // as llama.cpp applies them
  bool ignore_merges = false;
  bool add_bos = false;  // llama.cpp's default before tokenizer.ggml.add_bos_token
};
bool pre_tokenizer_for_gguf(const std::string& pre, PreTokenizerSpec* spec);

}  // namespace qt::tok
