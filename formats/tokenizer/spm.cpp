#include "formats/tokenizer/spm.h"

#include <queue>

#include <fmt/format.h>

#include "formats/tokenizer/unicode.h"

namespace qt::tok {

namespace {

// A symbol (<= 4 bytes) packed into 32 bits. Packing can only make different pairs look alike,
// which merely keeps two segments together.
inline uint32_t pack_symbol(std::string_view s) {
  uint32_t v = 0;
  for (size_t i = 0; i < s.size() && i < 4; ++i) v |= uint32_t(static_cast<uint8_t>(s[i])) << (8 * i);
  return v;
}
inline uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

// Symbol boundaries as llama.cpp cuts text: by the lead byte's length class, clamped at the end.
void symbol_starts(std::string_view s, std::vector<uint32_t>* starts) {
  starts->clear();
  for (size_t off = 0; off < s.size();) {
    starts->push_back(static_cast<uint32_t>(off));
    off += std::min(utf8_len(static_cast<uint8_t>(s[off])), s.size() - off);
  }
  starts->push_back(static_cast<uint32_t>(s.size()));
}

}  // namespace

void SpmTokenizer::finalize() {
  for (int b = 0; b < 256; ++b) {
    int32_t id = vocab.find(fmt::format("<0x{:02X}>", b));
    if (id < 0) id = vocab.find(std::string(1, static_cast<char>(b)));  // llama.cpp byte_to_token
    byte_tokens_[b] = id;
  }
  pairs_.clear();
  std::vector<uint32_t> st;
  for (const TokenInfo& t : vocab.tokens) {
    symbol_starts(t.text, &st);
    for (size_t i = 0; i + 2 < st.size(); ++i) {
      const std::string_view tv = t.text;
      pairs_.insert(pair_key(pack_symbol(tv.substr(st[i], st[i + 1] - st[i])),
                             pack_symbol(tv.substr(st[i + 1], st[i + 2] - st[i + 1]))));
    }
  }
}

int32_t SpmTokenizer::byte_token(uint8_t b) const {
  // llama.cpp throws (std::out_of_range) when neither <0xXX> nor the byte exists; we fall back to
  // <unk>, or drop the byte when there is none.
  return byte_tokens_[b] >= 0 ? byte_tokens_[b] : meta.unk;
}

void SpmTokenizer::encode_fragment(std::string_view frag, bool after_special, bool, std::vector<int32_t>* out) const {
  std::string text;
  text.reserve(frag.size() + frag.size() / 4 + 4);
  if (add_space_prefix && after_special) text += kSpaceMarker;
  for (char c : frag) {
    if (c == ' ')
      text += kSpaceMarker;
    else
      text += c;
  }
  const std::string_view tv = text;
  std::vector<uint32_t> st;
  symbol_starts(tv, &st);
  const size_t n = st.size() - 1;
  size_t seg = 0;
  uint32_t prev = n ? pack_symbol(tv.substr(st[0], st[1] - st[0])) : 0;
  for (size_t i = 1; i < n; ++i) {
    const uint32_t cur = pack_symbol(tv.substr(st[i], st[i + 1] - st[i]));
    if (!pairs_.count(pair_key(prev, cur))) {
      encode_segment(tv, st.data() + seg, i - seg, out);
      seg = i;
    }
    prev = cur;
  }
  if (n > seg) encode_segment(tv, st.data() + seg, n - seg, out);
}

// llm_tokenizer_spm_session::tokenize on symbols [starts[0], starts[n]).
void SpmTokenizer::encode_segment(std::string_view tv, const uint32_t* starts, size_t n,
                                  std::vector<int32_t>* out) const {
  struct Sym {
    int32_t prev, next;
    uint32_t begin, n;
  };
  std::vector<Sym> syms(n);
  for (size_t i = 0; i < n; ++i)
    syms[i] = {int32_t(i) - 1, i + 1 == n ? -1 : int32_t(i + 1), starts[i], starts[i + 1] - starts[i]};

  struct Bigram {
    int32_t left, right;
    float score;
    uint32_t size;
  };
  // Highest score first; equal scores: leftmost first (llm_bigram_spm::comparator).
  auto lower = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t size = syms[l].n + syms[r].n;
    const int32_t id = vocab.find(tv.substr(syms[l].begin, size));
    if (id < 0) return;
    queue.push({l, r, vocab.tokens[id].score, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(n); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Sym& l = syms[b.left];
    Sym& r = syms[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // one side already merged
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Every merged symbol is a token by construction; only single characters can be missing
  // (llama.cpp's resegment then falls back to bytes).
  for (int32_t i = 0; i != -1; i = syms[i].next) {
    const Sym& s = syms[i];
    const int32_t id = vocab.find(tv.substr(s.begin, s.n));
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (uint32_t k = 0; k < s.n; ++k) {
      const int32_t bid = byte_token(static_cast<uint8_t>(tv[s.begin + k]));
      if (bid >= 0) out->push_back(bid);
    }
  }
}

void SpmTokenizer::append_piece(int32_t id, bool first, std::string* out) const {
  const TokenInfo& t = vocab.tokens[id];
  std::string piece;
  switch (t.forced_control ? int32_t(kControl) : t.type) {
    case kNormal:
      for (size_t i = 0; i < t.text.size();) {
        if (t.text.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
          piece += ' ';
          i += kSpaceMarker.size();
        } else {
          piece += t.text[i++];
        }
      }
      break;
    case kByte:
      if (const int b = parse_byte_token(t.text); b >= 0)
        piece.push_back(static_cast<char>(b));
      else
        piece = t.text;
      break;
    case kControl:
    case kUnknown:
    case kUserDefined: piece = t.text; break;
    default:  // unused / undefined: llama.cpp renders nothing
      return;
  }
  // llama.cpp's detokenize removes the space that add_space_prefix put before the first word.
  if (first && add_space_prefix && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  out->append(piece);
}

}  // namespace qt::tok
