#include "formats/tokenizer/text_stream.h"

#include <algorithm>

namespace qt {

size_t utf8_incomplete_tail(const std::string& s) {
  // Walk back over at most 3 continuation bytes to the lead byte; the tail is incomplete when the
  // lead announces more bytes than follow it.
  const size_t n = s.size();
  for (size_t k = 1; k <= std::min<size_t>(4, n); ++k) {
    const auto c = static_cast<unsigned char>(s[n - k]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > k ? k : 0;
  }
  return 0;  // only continuation bytes: invalid, printed as they are
}

TextStream::TextStream(const Tokenizer& tok, std::vector<std::string> stop_strings) : tok_(tok) {
  for (std::string& s : stop_strings)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string TextStream::push(int32_t id) {
  if (stopped_) return "";
  ids_.push_back(id);
  text_ = tok_.decode(ids_);
  size_t longest = 0;
  for (const std::string& s : stops_) longest = std::max(longest, s.size());
  // A stop string can only end in the new text; it may start in the held-back part before it.
  size_t stop_at = std::string::npos;
  const size_t from = emitted_ >= longest ? emitted_ - longest : 0;
  for (const std::string& s : stops_) stop_at = std::min(stop_at, text_.find(s, from));
  if (stop_at != std::string::npos) {
    stopped_ = true;
    const size_t end = std::max(stop_at, emitted_);
    std::string out = text_.substr(emitted_, end - emitted_);
    emitted_ = end;
    return out;
  }
  size_t safe = text_.size() - utf8_incomplete_tail(text_);
  for (const std::string& s : stops_)  // hold back a suffix that starts a stop string
    for (size_t k = std::min(s.size() - 1, text_.size()); k > 0; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        safe = std::min(safe, text_.size() - k);
        break;
      }
  if (safe <= emitted_) return "";
  std::string out = text_.substr(emitted_, safe - emitted_);
  emitted_ = safe;
  return out;
}

std::string TextStream::finish() {
  if (stopped_ || emitted_ >= text_.size()) return "";
  std::string out = text_.substr(emitted_);
  emitted_ = text_.size();
  return out;
}

}  // namespace qt
