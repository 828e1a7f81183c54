#include "formats/tokenizer/vocab.h"

#include <algorithm>

#include "formats/error.h"

namespace qt::tok {

void Vocab::build_index(const std::string& where) {
  ids.clear();
  ids.reserve(tokens.size() * 2);
  specials.clear();
  for (int32_t i = 0; i < size(); ++i) {
    const TokenInfo& t = tokens[i];
    if (t.text.empty()) continue;  // a hole in the id space; never produced by encode
    auto [it, inserted] = ids.emplace(t.text, i);
    // llama.cpp asserts that texts are unique (id_to_token.size() == token_to_id.size()).
    if (!inserted) user_error("{}: tokens {} and {} have the same text '{}'", where, it->second, i, t.text);
    if (t.partitioned()) specials.push_back(i);
  }
  std::stable_sort(specials.begin(), specials.end(),
                   [&](int32_t a, int32_t b) { return tokens[a].text.size() > tokens[b].text.size(); });
}

namespace {
// C-locale isspace, as llama.cpp's partitioning uses.
bool c_isspace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
}  // namespace

void partition_specials(const Vocab& v, std::string_view text, bool parse_special, std::vector<Fragment>* out) {
  out->clear();
  if (text.empty()) return;
  out->push_back({false, -1, 0, static_cast<uint32_t>(text.size())});
  std::vector<Fragment> next;
  for (int32_t id : v.specials) {
    const TokenInfo& t = v.tokens[id];
    if (!parse_special && t.special()) continue;
    const std::string_view needle = t.text;
    // Most special tokens never occur: check the whole text once before rebuilding the list.
    if (text.find(needle) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : *out) {
      if (f.is_token) {
        next.push_back(f);
        continue;
      }
      uint32_t base = f.begin, end = f.end;
      while (base < end) {
        const size_t m = text.substr(0, end).find(needle, base);
        if (m == std::string_view::npos) {
          next.push_back({false, -1, base, end});
          break;
        }
        uint32_t left_end = static_cast<uint32_t>(m);
        if (t.lstrip)
          while (left_end > base && c_isspace(text[left_end - 1])) --left_end;
        if (left_end > base) next.push_back({false, -1, base, left_end});
        next.push_back({true, id, 0, 0});
        uint32_t right = static_cast<uint32_t>(m + needle.size());
        if (t.rstrip)
          while (right < end && c_isspace(text[right])) ++right;
        base = right;
      }
    }
    out->swap(next);
  }
}

std::vector<int32_t> TokenizerBase::encode(std::string_view text, bool add_special, bool parse_special) const {
  // Offsets are 32-bit throughout.
  if (text.size() >= (size_t(1) << 32))
    user_error("{}: cannot tokenize {} bytes at once (limit 4 GiB)", meta.source, text.size());
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && meta.add_bos && meta.bos >= 0) out.push_back(meta.bos);
  std::vector<Fragment> frags;
  partition_specials(vocab, text, parse_special, &frags);
  bool after_special = true;
  for (const Fragment& f : frags) {
    if (f.is_token) {
      out.push_back(f.id);
      after_special = true;
    } else {
      encode_fragment(text.substr(f.begin, f.end - f.begin), after_special, f.begin == 0, &out);
      after_special = false;
    }
  }
  if (add_special && meta.add_eos && meta.eos >= 0) out.push_back(meta.eos);
  return out;
}

std::string TokenizerBase::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!vocab.valid(ids[i]))
      user_error("{}: cannot decode token id {} (vocabulary has {} tokens)", meta.source, ids[i], vocab.size());
    append_piece(ids[i], i == 0, &out);
  }
  return out;
}

}  // namespace qt::tok
