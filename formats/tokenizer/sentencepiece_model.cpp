#include "formats/tokenizer/sentencepiece_model.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "formats/error.h"

namespace qt::tok {

namespace {

// Protobuf wire format (protobuf.dev/programming-guides/encoding): a key varint (field << 3 |
// wire type), then a varint (0), 8 bytes (1), a length-prefixed payload (2) or 4 bytes (5).
struct Reader {
  std::string_view s;
  size_t pos = 0;
  const std::string& where;

  [[noreturn]] void fail(const char* what) const { user_error("{}: not a SentencePiece model ({})", where, what); }
  bool done() const { return pos >= s.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= s.size()) fail("truncated varint");
      const uint8_t b = static_cast<uint8_t>(s[pos++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > s.size() - pos) fail("field runs past the end");
    std::string_view out = s.substr(pos, size_t(n));
    pos += size_t(n);
    return out;
  }
  uint32_t fixed32() {
    if (s.size() - pos < 4) fail("truncated fixed32");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(static_cast<uint8_t>(s[pos + size_t(i)])) << (8 * i);
    pos += 4;
    return v;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1:
        if (s.size() - pos < 8) fail("truncated fixed64");
        pos += 8;
        break;
      case 2: bytes(); break;
      case 5: fixed32(); break;
      default: fail("unknown wire type");
    }
  }
};

SentencePieceModel::Piece parse_piece(std::string_view msg, const std::string& where) {
  SentencePieceModel::Piece p;
  Reader r{msg, 0, where};
  while (!r.done()) {
    const uint64_t key = r.varint();
    const uint32_t field = uint32_t(key >> 3), wire = uint32_t(key & 7);
    if (field == 1 && wire == 2) {
      p.text = std::string(r.bytes());
    } else if (field == 2 && wire == 5) {
      const uint32_t bits = r.fixed32();
      std::memcpy(&p.score, &bits, 4);
    } else if (field == 3 && wire == 0) {
      p.type = static_cast<int32_t>(r.varint());
      if (p.type < 1 || p.type > 6) r.fail("piece type out of range");
    } else {
      r.skip(wire);
    }
  }
  return p;
}

}  // namespace

SentencePieceModel parse_sentencepiece_model(std::string_view bytes, const std::string& where) {
  SentencePieceModel m;
  Reader r{bytes, 0, where};
  while (!r.done()) {
    const uint64_t key = r.varint();
    const uint32_t field = uint32_t(key >> 3), wire = uint32_t(key & 7);
    if (field == 1 && wire == 2) {
      m.pieces.push_back(parse_piece(r.bytes(), where));
    } else if (field == 3 && wire == 2) {  // NormalizerSpec
      Reader n{r.bytes(), 0, where};
      while (!n.done()) {
        const uint64_t k = n.varint();
        if ((k >> 3) == 3 && (k & 7) == 0)
          m.add_dummy_prefix = n.varint() != 0;
        else
          n.skip(uint32_t(k & 7));
      }
    } else {
      r.skip(wire);
    }
  }
  if (m.pieces.empty()) r.fail("no pieces");
  return m;
}

SentencePieceModel read_sentencepiece_model(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) user_error("{}: cannot open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_sentencepiece_model(ss.str(), path);
}

}  // namespace qt::tok
