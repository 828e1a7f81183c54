// Incremental detokenization for streaming generation: token ids in, printable text out, as
// soon as it is final. The whole id sequence is decoded again at each step (a token's text can
// depend on its neighbours: SentencePiece's leading space, byte-fallback pieces of one character),
// and only what cannot change is released: complete UTF-8 characters, and nothing that could
// still grow into one of the stop strings.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/tokenizer/tokenizer.h"

namespace qt {

class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stop_strings);
  // Appends a token; returns the text it makes final (possibly empty). After a stop string
  // appears, returns the text before it and stopped() is true; further pushes return "".
  std::string push(int32_t id);
  bool stopped() const { return stopped_; }
  // The text held back (an unfinished UTF-8 tail, a partial stop string): at the end of generation.
  std::string finish();
  const std::string& text() const { return text_; }  // everything decoded so far

 private:
  const Tokenizer& tok_;
  std::vector<std::string> stops_;
  std::vector<int32_t> ids_;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

// Bytes at the end of s that start a UTF-8 sequence not yet complete (0..3).
size_t utf8_incomplete_tail(const std::string& s);

}  // namespace qt
