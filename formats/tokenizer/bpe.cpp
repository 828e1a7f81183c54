#include "formats/tokenizer/bpe.h"

#include <queue>

#include <fmt/format.h>

#include "formats/error.h"
#include "formats/tokenizer/unicode.h"

namespace qt::tok {

// ---------------------------------------------------------------------------------------------
// MergeTable: open addressing with linear probing; the hot lookup of the whole tokenizer.

namespace {
inline uint64_t pair_key(int32_t l, int32_t r) { return ((uint64_t(uint32_t(l)) << 32) | uint32_t(r)) + 1; }
inline size_t hash_key(uint64_t k) { return size_t((k * 0x9E3779B97F4A7C15ull) >> 20); }
}  // namespace

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(cap, Slot{0, 0, 0});
  mask_ = cap - 1;
  count_ = 0;
  for (const Slot& s : old)
    if (s.key) {
      size_t i = hash_key(s.key) & mask_;
      while (slots_[i].key) i = (i + 1) & mask_;
      slots_[i] = s;
      ++count_;
    }
}

void MergeTable::grow() { reserve(std::max<size_t>(16, count_ * 2 + 2)); }

void MergeTable::add(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const uint64_t k = pair_key(left, right);
  size_t i = hash_key(k) & mask_;
  while (slots_[i].key) {
    if (slots_[i].key == k) return;  // first occurrence keeps its rank (llama.cpp bpe_ranks.emplace)
    i = (i + 1) & mask_;
  }
  slots_[i] = Slot{k, rank, merged};
  ++count_;
}

int32_t MergeTable::find(int32_t left, int32_t right, int32_t* merged) const {
  if (left < 0 || right < 0 || slots_.empty()) return -1;
  const uint64_t k = pair_key(left, right);
  size_t i = hash_key(k) & mask_;
  while (true) {
    const Slot& s = slots_[i];
    if (s.key == k) {
      *merged = s.merged;
      return s.rank;
    }
    if (!s.key) return -1;
    i = (i + 1) & mask_;
  }
}

// ---------------------------------------------------------------------------------------------

void BpeTokenizer::finalize() {
  extra_.clear();
  extra_ids_.clear();
  table_ = MergeTable();
  table_.reserve(merges.size());
  auto id_or_extra = [&](const std::string& s) -> int32_t {
    const int32_t id = lookup_symbol(s);
    if (id >= 0) return id;
    extra_.push_back(s);
    const int32_t nid = vocab.size() + static_cast<int32_t>(extra_.size()) - 1;
    extra_ids_.emplace(s, nid);
    return nid;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    if (a.empty() || b.empty()) continue;
    const int32_t ia = id_or_extra(a), ib = id_or_extra(b), im = id_or_extra(a + b);
    table_.add(ia, ib, static_cast<int32_t>(rank), im);
  }
  for (int b = 0; b < 256; ++b) byte_tokens_[b] = vocab.find(fmt::format("<0x{:02X}>", b));
  splitter_.reset();
  if (byte_level || !regexes.empty()) splitter_ = std::make_unique<RegexSplitter>(regexes, meta.source);
}

std::string BpeTokenizer::kind() const {
  if (!byte_level) return "bpe-spm (tokenizer.json)";
  return pre_name.empty() ? "bpe (tokenizer.json)" : fmt::format("bpe ({})", pre_name);
}

int32_t BpeTokenizer::lookup_symbol(std::string_view s) const {
  const int32_t id = vocab.find(s);
  if (id >= 0) return id;
  auto it = extra_ids_.find(s);
  return it == extra_ids_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_fragment(std::string_view frag, bool after_special, bool at_start,
                                   std::vector<int32_t>* out) const {
  (void)after_special;
  std::string buf_text, buf_match;
  std::string_view text = frag, match = frag;

  if (!byte_level) {
    // SentencePiece-style: normalise the whole fragment, then BPE over it (or over its Metaspace
    // words). HF runs this per added-token-free section, which is what a fragment is.
    bool pre = !frag.empty() && (prepend == Prepend::kAlways || (prepend == Prepend::kFirst && at_start));
    // HF Metaspace does not add a second marker when the text already starts with one.
    if (pre && prepend_if_missing &&
        ((replace_spaces && frag[0] == ' ') || frag.substr(0, kSpaceMarker.size()) == kSpaceMarker))
      pre = false;
    buf_text.reserve(frag.size() + 16);
    if (pre) buf_text += kSpaceMarker;
    for (char c : frag) {
      if (c == ' ' && replace_spaces)
        buf_text += kSpaceMarker;
      else
        buf_text += c;
    }
    if (!splitter_) {
      bpe_word(buf_text, out);
      return;
    }
    if (!is_valid_utf8(buf_text)) {
      std::string t;
      sanitize_utf8(buf_text, &t, &buf_match);
      buf_text.swap(t);
      match = buf_match;
    } else {
      match = buf_text;
    }
    std::vector<Piece> pieces;
    splitter_->split(match, &pieces);
    for (const Piece& p : pieces) bpe_word(std::string_view(buf_text).substr(p.begin, p.end - p.begin), out);
    return;
  }

  // Byte-level: llama.cpp splits the code points it decoded (invalid bytes -> U+FFFD), then maps
  // each word's UTF-8 bytes into the byte alphabet.
  if (!is_valid_utf8(frag)) {
    sanitize_utf8(frag, &buf_text, &buf_match);
    text = buf_text;
    match = buf_match;
  }
  std::string pre_text, pre_match;
  if (add_prefix_space && (text.empty() || text[0] != ' ')) {
    pre_text.reserve(text.size() + 1);
    pre_text.push_back(' ');
    pre_text.append(text);
    pre_match.reserve(match.size() + 1);
    pre_match.push_back(' ');
    pre_match.append(match);
    text = pre_text;
    match = pre_match;
  }
  std::vector<Piece> pieces;
  pieces.reserve(text.size() / 4 + 1);
  splitter_->split(match, &pieces);

  // Words repeat a lot in real text: remember each short word's ids for this call.
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;
  cache.reserve(pieces.size() / 4 + 16);
  std::vector<int32_t> cache_ids;
  std::string mapped;
  for (const Piece& p : pieces) {
    const std::string_view raw = text.substr(p.begin, p.end - p.begin);
    const bool cacheable = raw.size() <= 64;
    if (cacheable) {
      auto it = cache.find(raw);
      if (it != cache.end()) {
        out->insert(out->end(), cache_ids.begin() + it->second.first,
                    cache_ids.begin() + it->second.first + it->second.second);
        continue;
      }
    }
    mapped.clear();
    byte_encode(raw, &mapped);
    const size_t before = out->size();
    bpe_word(mapped, out);
    if (cacheable) {
      cache.emplace(raw, std::make_pair(uint32_t(cache_ids.size()), uint32_t(out->size() - before)));
      cache_ids.insert(cache_ids.end(), out->begin() + before, out->end());
    }
  }
}

void BpeTokenizer::bpe_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    const int32_t id = vocab.find(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  std::vector<Sym> syms;
  syms.reserve(word.size());
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = std::min(utf8_len(static_cast<uint8_t>(word[pos])), word.size() - pos);
    const auto b = static_cast<uint32_t>(pos), e = static_cast<uint32_t>(pos + len);
    pos += len;
    const int32_t id = lookup_symbol(word.substr(b, len));
    if (id >= 0 || byte_level) {
      syms.push_back({id, b, e});
      continue;
    }
    // HF BPE for a character outside the vocabulary: its bytes as <0xXX> tokens, else unk.
    if (byte_fallback) {
      bool all = true;
      for (uint32_t k = b; k < e; ++k) all = all && byte_tokens_[static_cast<uint8_t>(word[k])] >= 0;
      if (all) {
        for (uint32_t k = b; k < e; ++k) syms.push_back({byte_tokens_[static_cast<uint8_t>(word[k])], k, k + 1});
        continue;
      }
    }
    if (meta.unk >= 0) {
      if (fuse_unk && !syms.empty() && syms.back().id == meta.unk) {
        syms.back().end = e;
      } else {
        syms.push_back({meta.unk, b, e});
      }
      continue;
    }
    syms.push_back({-1, b, e});
  }
  if (syms.size() > 1) {
    if (syms.size() <= 48)
      merge_small(syms);
    else
      merge_large(syms);
  }
  emit(word, syms, out);
}

// Repeatedly merge the adjacent pair of lowest rank, leftmost first: the order of llama.cpp's
// priority queue (rank, then left position) and of HF's BPE. Quadratic, for short words.
void BpeTokenizer::merge_small(std::vector<Sym>& s) const {
  int32_t rank[48], merged[48];
  size_t n = s.size();
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = table_.find(s[i].id, s[i + 1].id, &merged[i]);
  while (n > 1) {
    int best = -1;
    for (size_t i = 0; i + 1 < n; ++i)
      if (rank[i] >= 0 && (best < 0 || rank[i] < rank[best])) best = static_cast<int>(i);
    if (best < 0) break;
    s[best].id = merged[best];
    s[best].end = s[best + 1].end;
    for (size_t i = best + 1; i + 1 < n; ++i) s[i] = s[i + 1];
    for (size_t i = best; i + 2 < n; ++i) {
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) rank[best - 1] = table_.find(s[best - 1].id, s[best].id, &merged[best - 1]);
    if (size_t(best) + 1 < n) rank[best] = table_.find(s[best].id, s[best + 1].id, &merged[best]);
  }
  s.resize(n);
}

// The same order with a heap over a linked list (llama.cpp's algorithm), for long words such as
// a whole SentencePiece-style fragment.
void BpeTokenizer::merge_large(std::vector<Sym>& s) const {
  const int32_t n = static_cast<int32_t>(s.size());
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank, left, lid, rid, merged;
  };
  auto worse = [](const Cand& a, const Cand& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> heap(worse);
  auto push = [&](int32_t l) {
    if (l < 0 || next[l] < 0) return;
    const int32_t r = next[l];
    int32_t m;
    const int32_t rk = table_.find(s[l].id, s[r].id, &m);
    if (rk >= 0) heap.push({rk, l, s[l].id, s[r].id, m});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int32_t l = c.left;
    if (dead[l]) continue;
    const int32_t r = next[l];
    if (r < 0 || s[l].id != c.lid || s[r].id != c.rid) continue;  // stale
    s[l].id = c.merged;
    s[l].end = s[r].end;
    dead[r] = true;
    next[l] = next[r];
    if (next[r] >= 0) prev[next[r]] = l;
    push(prev[l]);
    push(l);
  }
  size_t k = 0;
  for (int32_t i = 0; i < n; ++i)
    if (!dead[i]) s[k++] = s[i];
  s.resize(k);
}

void BpeTokenizer::emit(std::string_view word, const std::vector<Sym>& syms, std::vector<int32_t>* out) const {
  for (const Sym& sy : syms) {
    if (sy.id >= 0 && sy.id < vocab.size()) {
      out->push_back(sy.id);
      continue;
    }
    // Not a token (an unknown character, or a merge-only string): llama.cpp looks each byte up
    // as a one-byte token text and drops the bytes that have none.
    for (uint32_t k = sy.begin; k < sy.end; ++k) {
      int32_t id = byte_level ? vocab.find(word.substr(k, 1)) : byte_tokens_[static_cast<uint8_t>(word[k])];
      if (id >= 0) out->push_back(id);
    }
  }
}

void BpeTokenizer::append_piece(int32_t id, bool first, std::string* out) const {
  const TokenInfo& t = vocab.tokens[id];
  if (t.forced_control) {
    out->append(t.text);
    return;
  }
  switch (t.type) {
    case kUnused: return;
    case kByte:
      if (const int b = parse_byte_token(t.text); b >= 0) {
        out->push_back(static_cast<char>(b));
        return;
      }
      break;
    case kControl:
    case kUnknown:
    case kUserDefined: out->append(t.text); return;
    default: break;
  }
  if (byte_level) {
    byte_decode(t.text, out);
    return;
  }
  std::string piece;
  piece.reserve(t.text.size());
  for (size_t i = 0; i < t.text.size();) {
    if (t.text.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
      piece += ' ';
      i += kSpaceMarker.size();
    } else {
      piece += t.text[i++];
    }
  }
  // HF's Strip(" ", 1, 0) decoder: the space prepended when encoding goes away again.
  if (first && prepend != Prepend::kNever && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  out->append(piece);
}

}  // namespace qt::tok
