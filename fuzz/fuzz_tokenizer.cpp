// libFuzzer target for the tokenizers: arbitrary bytes are encoded with real vocabularies
// (llama.cpp's vocab GGUFs: byte-level BPE with several pre-tokenizers, and SentencePiece), then
// decoded. Input byte 0 picks the vocabulary and the flags, the rest is the text.
// Besides crashes and sanitizer reports, it traps on broken invariants:
//  - every id is inside the vocabulary;
//  - byte-level BPE is lossless when the vocabulary has a token for every byte that valid UTF-8
//    can contain: decode(encode(x)) == x as llama.cpp reads it (invalid UTF-8 bytes become U+FFFD).
//    (Falcon lacks a few control bytes, which llama.cpp drops.)
//  - SentencePiece with byte fallback is lossless for valid UTF-8 without '▁' when special tokens
//    are not parsed (one space is added in front, and removed again by decode). Not for invalid
//    UTF-8: llama.cpp cuts symbols by the lead byte, so a stray lead byte can swallow part of the
//    '▁' that replaced the next space, which then comes back as its raw bytes (same in llama.cpp).
// Vocabularies: $QT_TOKENIZER_VECTORS, else the repository's data/tokenizer-vectors.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer/tokenizer.h"
#include "formats/tokenizer/unicode.h"

namespace {

struct Vocab {
  std::unique_ptr<qt::Tokenizer> tok;
  bool byte_level;  // and every byte of valid UTF-8 round-trips
};

// Every byte value that can occur in valid UTF-8, each inside a shortest valid character.
bool covers_all_bytes(const qt::Tokenizer& t) {
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    const char c = static_cast<char>(b);
    if (b < 0x80)
      ch = {c};
    else if (b < 0xC0)
      ch = {'\xC2', c};
    else if (b < 0xC2)
      continue;
    else if (b < 0xE0)
      ch = {c, '\x80'};
    else if (b == 0xE0)
      ch = "\xE0\xA0\x80";
    else if (b == 0xED)
      ch = "\xED\x80\x80";
    else if (b < 0xF0)
      ch = {c, '\x80', '\x80'};
    else if (b == 0xF0)
      ch = "\xF0\x90\x80\x80";
    else if (b < 0xF5)
      ch = {c, '\x80', '\x80', '\x80'};
    else
      continue;
    if (t.decode(t.encode(ch, false)) != ch) return false;
  }
  return true;
}

std::vector<Vocab> load() {
  namespace fs = std::filesystem;
  fs::path dir;
  if (const char* e = std::getenv("QT_TOKENIZER_VECTORS")) {
    dir = e;
  } else {
    dir = fs::path(__FILE__).parent_path().parent_path() / "data" / "tokenizer-vectors";
  }
  std::vector<Vocab> v;
  for (const char* name : {"gpt-2", "llama-spm", "mpt", "deepseek-coder", "falcon", "starcoder", "phi-3"}) {
    const fs::path p = dir / (std::string("ggml-vocab-") + name + ".gguf");
    if (!fs::exists(p)) {
      std::fprintf(stderr, "fuzz_tokenizer: missing %s (set QT_TOKENIZER_VECTORS)\n", p.c_str());
      std::abort();
    }
    auto t = qt::tokenizer_from_gguf(qt::GgufFile::open(p.string()));
    const bool bl = t->kind().rfind("bpe", 0) == 0 && covers_all_bytes(*t);
    v.push_back({std::move(t), bl});
  }
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Vocab> vocabs = load();
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const Vocab& v = vocabs[sel % vocabs.size()];
  const bool parse_special = sel & 0x80, add_special = sel & 0x40;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const std::vector<int32_t> ids = v.tok->encode(text, add_special, parse_special);
  for (int32_t id : ids)
    if (id < 0 || id >= v.tok->vocab_size()) __builtin_trap();
  const std::string back = v.tok->decode(ids);
  if (add_special) return 0;
  if (v.byte_level) {
    std::string want, match;
    qt::tok::sanitize_utf8(text, &want, &match);
    if (back != want) __builtin_trap();
  } else if (!parse_special && text.find(qt::tok::kSpaceMarker) == std::string_view::npos && v.tok->kind() == "spm" &&
             qt::tok::is_valid_utf8(text)) {
    if (back != text) __builtin_trap();
  }
  return 0;
}
