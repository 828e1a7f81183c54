#include "formats/tokenizer/unicode.h"

namespace qt::tok {

bool decode_utf8(std::string_view s, size_t* pos, uint32_t* cpt) {
  const size_t i = *pos;
  const size_t n = s.size();
  auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  auto cont = [&](size_t k) { return k < n && (b(k) & 0xC0) == 0x80; };
  const uint8_t c = b(i);
  if (c < 0x80) {
    *cpt = c;
    *pos = i + 1;
    return true;
  }
  // Same acceptance as llama.cpp: only the lead byte's length class and the continuation bytes'
  // top bits are checked (overlong forms and surrogates pass).
  if ((c & 0xE0) == 0xC0 && cont(i + 1)) {
    *cpt = (uint32_t(c & 0x1F) << 6) | (b(i + 1) & 0x3F);
    *pos = i + 2;
    return true;
  }
  if ((c & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
    *cpt = (uint32_t(c & 0x0F) << 12) | (uint32_t(b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
    *pos = i + 3;
    return true;
  }
  if ((c & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
    uint32_t v = (uint32_t(c & 0x07) << 18) | (uint32_t(b(i + 1) & 0x3F) << 12) | (uint32_t(b(i + 2) & 0x3F) << 6) |
                 (b(i + 3) & 0x3F);
    // llama.cpp would throw when re-encoding these; we treat the lead byte as invalid instead.
    if (v <= 0x10FFFF) {
      *cpt = v;
      *pos = i + 4;
      return true;
    }
  }
  *cpt = kReplacementChar;
  *pos = i + 1;
  return false;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt < 0x80) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Fast path over ASCII, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cpt;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cpt = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cpt = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cpt = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      const uint8_t d = static_cast<uint8_t>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cpt = (cpt << 6) | (d & 0x3F);
    }
    if ((len == 3 && cpt < 0x800) || (len == 4 && (cpt < 0x10000 || cpt > 0x10FFFF))) return false;
    if (cpt >= 0xD800 && cpt <= 0xDFFF) return false;
    i += len;
  }
  return true;
}

void sanitize_utf8(std::string_view in, std::string* text, std::string* match) {
  text->clear();
  match->clear();
  text->reserve(in.size() + 8);
  match->reserve(in.size() + 8);
  size_t pos = 0;
  while (pos < in.size()) {
    uint32_t cpt;
    decode_utf8(in, &pos, &cpt);
    append_utf8(*text, cpt);
    append_utf8(*match, (cpt >= 0xD800 && cpt <= 0xDFFF) ? 0xE000 : cpt);
  }
}

namespace {
ByteAlphabet make_alphabet() {
  ByteAlphabet a;
  a.cpt_to_byte.fill(-1);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    a.byte_to_cpt[b] = printable ? uint32_t(b) : next++;
  }
  for (int b = 0; b < 256; ++b) {
    a.byte_to_utf8[b].clear();
    append_utf8(a.byte_to_utf8[b], a.byte_to_cpt[b]);
    a.cpt_to_byte[a.byte_to_cpt[b]] = static_cast<int16_t>(b);
  }
  return a;
}
}  // namespace

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet a = make_alphabet();
  return a;
}

void byte_encode(std::string_view raw, std::string* out) {
  const ByteAlphabet& a = byte_alphabet();
  for (char c : raw) out->append(a.byte_to_utf8[static_cast<uint8_t>(c)]);
}

void byte_decode(std::string_view mapped, std::string* out) {
  const ByteAlphabet& a = byte_alphabet();
  size_t pos = 0;
  while (pos < mapped.size()) {
    const size_t start = pos;
    uint32_t cpt;
    if (decode_utf8(mapped, &pos, &cpt)) {
      const int b = a.byte_of(cpt);
      if (b >= 0) {
        out->push_back(static_cast<char>(b));
        continue;
      }
    }
    out->append(mapped.substr(start, pos - start));
  }
}

int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace qt::tok
