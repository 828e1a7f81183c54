// UTF-8 and byte-level-alphabet helpers shared by the tokenizers.
// Decoding follows llama.cpp (src/unicode.cpp unicode_cpts_from_utf8): lenient about overlong forms
// and surrogates, and every byte that does not start a complete sequence becomes U+FFFD. We never
// reject text: a tokenizer must tokenize whatever bytes it is given.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace qt::tok {

constexpr uint32_t kReplacementChar = 0xFFFD;

// Number of bytes of the UTF-8 sequence that starts with `lead`, from its high nibble only
// (1 for ASCII and stray continuation bytes, 2 for 0xC_/0xD_, 3 for 0xE_, 4 for 0xF_), the way
// llama.cpp's unicode_len_utf8 splits text into symbols.
inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Decodes the code point at s[*pos] and advances *pos. Returns false (and advances by one byte)
// when the bytes there are not a sequence llama.cpp accepts, or decode to more than U+10FFFF.
bool decode_utf8(std::string_view s, size_t* pos, uint32_t* cpt);

void append_utf8(std::string& out, uint32_t cpt);  // cpt <= 0x10FFFF

// Strictly valid UTF-8 (no overlong forms, no surrogates, <= U+10FFFF): what PCRE2 accepts.
bool is_valid_utf8(std::string_view s);

// Rewrites `in` the way llama.cpp sees it: each decoded code point re-encoded, each undecodable byte
// replaced by U+FFFD. `text` receives that string. `match` receives the same bytes except that
// surrogate code points (which llama.cpp keeps, but PCRE2 refuses) are replaced by U+E000, a
// private-use character of the same length and of the same regex class ([^\s\p{L}\p{N}]), so the
// regexes can run on `match` and their offsets apply to `text`.
void sanitize_utf8(std::string_view in, std::string* text, std::string* match);

// GPT-2's byte-level alphabet (docs/spec/tokenizer.md §Byte-level alphabet): byte b <-> one
// printable code point.
struct ByteAlphabet {
  std::array<uint32_t, 256> byte_to_cpt;
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 324> cpt_to_byte;  // code points used are < 324; -1 elsewhere
  int byte_of(uint32_t cpt) const { return cpt < cpt_to_byte.size() ? cpt_to_byte[cpt] : -1; }
};
const ByteAlphabet& byte_alphabet();

// Appends the byte-level spelling of `raw` (each byte as its alphabet character).
void byte_encode(std::string_view raw, std::string* out);
// Inverse: alphabet characters back to bytes; other characters are copied as UTF-8.
void byte_decode(std::string_view mapped, std::string* out);

// The byte a "<0xXX>" token stands for (two hex digits, either case), or -1.
int parse_byte_token(std::string_view text);

// The SentencePiece space marker U+2581 '▁'.
inline constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

}  // namespace qt::tok
