// HF tokenizer.json / tokenizer_config.json for a tokenizer read from GGUF (a tokenizer read from
// a HF folder re-emits the files it was read from).
//  - Byte-level BPE: the structure HF's own files have for the family (docs/spec/tokenizer.md
//    §Pre-tokenizers): GPT-2
//    `ByteLevel(use_regex)`; SmolLM/StarCoder `Sequence[Digits(individual), ByteLevel(use_regex)]`;
//    Llama-3 / Qwen2 `Sequence[Split(regex, Isolated), ByteLevel(use_regex false)]`; other
//    families one Split per llama.cpp regex.
//  - SentencePiece (llama.cpp `llama` model): the Llama-2 legacy layout (docs/spec/tokenizer.md
//    §SentencePiece-style BPE), with
//    merges recovered from the scores as transformers does (tokenization_utils_base.generate_merges).
#include <algorithm>

#include "formats/tokenizer/bpe.h"
#include "formats/tokenizer/spm.h"
#include "formats/tokenizer/unicode.h"

namespace qt::tok {

namespace {

using nlohmann::json;

json byte_level_node(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", trim_offsets},
          {"use_regex", use_regex}};
}

json split_node(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

json added_tokens(const Vocab& v) {
  json out = json::array();
  for (int32_t id = 0; id < v.size(); ++id) {
    const TokenInfo& t = v.tokens[id];
    if (!t.partitioned()) continue;
    out.push_back({{"id", id},
                   {"content", t.text},
                   {"single_word", false},
                   {"lstrip", t.lstrip},
                   {"rstrip", t.rstrip},
                   {"normalized", !t.special()},
                   {"special", t.special()}});
  }
  return out;
}

json added_tokens_decoder(const Vocab& v) {
  json out = json::object();
  for (int32_t id = 0; id < v.size(); ++id) {
    const TokenInfo& t = v.tokens[id];
    if (!t.partitioned()) continue;
    out[std::to_string(id)] = {{"content", t.text},  {"lstrip", t.lstrip},   {"normalized", !t.special()},
                               {"rstrip", t.rstrip}, {"single_word", false}, {"special", t.special()}};
  }
  return out;
}

json vocab_object(const Vocab& v) {
  json out = json::object();
  for (int32_t id = 0; id < v.size(); ++id)
    if (!v.tokens[id].text.empty()) out[v.tokens[id].text] = id;
  return out;
}

// TemplateProcessing adding BOS and/or EOS around each sequence.
json template_processing(const Vocab& v, const TokenizerMeta& m) {
  json single = json::array(), pair = json::array(), specials = json::object();
  auto special = [&](int32_t id, int type_id) {
    const std::string& s = v.tokens[id].text;
    specials[s] = {{"id", s}, {"ids", {id}}, {"tokens", {s}}};
    return json{{"SpecialToken", {{"id", s}, {"type_id", type_id}}}};
  };
  const bool bos = m.add_bos && v.valid(m.bos), eos = m.add_eos && v.valid(m.eos);
  auto wrap = [&](json& seq, const char* name, int type_id) {
    if (bos) seq.push_back(special(m.bos, type_id));
    seq.push_back({{"Sequence", {{"id", name}, {"type_id", type_id}}}});
    if (eos) seq.push_back(special(m.eos, type_id));
  };
  wrap(single, "A", 0);
  wrap(pair, "A", 0);
  wrap(pair, "B", 1);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
}

json token_or_null(const Vocab& v, int32_t id) { return v.valid(id) ? json(v.tokens[id].text) : json(); }

// tokenizer.json's "model": byte-level BPE (no unk, no fallback) or SentencePiece-style (unk,
// unknown bytes fused and spelled as <0xXX> tokens).
json bpe_model(const Vocab& v, json unk, bool spm_style, bool ignore_merges, json merges) {
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", std::move(unk)},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", spm_style},
          {"byte_fallback", spm_style},
          {"ignore_merges", ignore_merges},
          {"vocab", vocab_object(v)},
          {"merges", std::move(merges)}};
}

json base_config(const Vocab& v, const TokenizerMeta& m) {
  json c = json::object();
  c["add_bos_token"] = m.add_bos;
  c["add_eos_token"] = m.add_eos;
  c["added_tokens_decoder"] = added_tokens_decoder(v);
  c["bos_token"] = token_or_null(v, m.bos);
  c["eos_token"] = token_or_null(v, m.eos);
  c["unk_token"] = token_or_null(v, m.unk);
  if (v.valid(m.pad)) c["pad_token"] = v.tokens[m.pad].text;
  c["clean_up_tokenization_spaces"] = false;
  if (m.model_max_length > 0) c["model_max_length"] = m.model_max_length;
  if (!m.chat_template.empty()) c["chat_template"] = m.chat_template;
  return c;
}

}  // namespace

nlohmann::json BpeTokenizer::to_hf_tokenizer_json() const {
  if (meta.hf_tokenizer_json) return *meta.hf_tokenizer_json;
  json j = json::object();
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added_tokens(vocab);
  j["normalizer"] = pre_family == "qwen2" ? json{{"type", "NFC"}} : json();

  json pre;
  if (pre_family == "gpt-2" || pre_family == "mpt") {
    pre = byte_level_node(false, true, true);
  } else if (pre_family == "smollm" || pre_family == "starcoder" || pre_family == "refact") {
    pre = {{"type", "Sequence"},
           {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level_node(false, true, true)}}};
  } else if (pre_family == "llama-bpe" || pre_family == "dbrx") {
    pre = {{"type", "Sequence"}, {"pretokenizers", {split_node(re::kLlama3), byte_level_node(false, true, false)}}};
  } else if (pre_family == "qwen2") {
    pre = {{"type", "Sequence"}, {"pretokenizers", {split_node(re::kQwen2), byte_level_node(false, false, false)}}};
  } else {
    json list = json::array();
    for (const std::string& r : regexes) list.push_back(split_node(r));
    list.push_back(byte_level_node(false, true, false));
    pre = {{"type", "Sequence"}, {"pretokenizers", list}};
  }
  j["pre_tokenizer"] = pre;
  if (meta.add_bos || meta.add_eos) {
    j["post_processor"] = {{"type", "Sequence"},
                           {"processors", {byte_level_node(true, false, true), template_processing(vocab, meta)}}};
  } else {
    j["post_processor"] = byte_level_node(true, false, true);
  }
  j["decoder"] = byte_level_node(true, true, true);

  // HF requires both halves and their concatenation to be tokens; other merges (which llama.cpp
  // would still apply by string) cannot be expressed and are left out.
  json merges_json = json::array();
  for (const auto& [a, b] : merges) {
    if (a.empty() || b.empty()) continue;
    if (vocab.find(a) < 0 || vocab.find(b) < 0 || vocab.find(a + b) < 0) continue;
    merges_json.push_back({a, b});
  }
  j["model"] = bpe_model(vocab, json(), false, ignore_merges, std::move(merges_json));
  return j;
}

nlohmann::json BpeTokenizer::to_hf_tokenizer_config() const {
  if (meta.hf_tokenizer_config) return *meta.hf_tokenizer_config;
  json c = base_config(vocab, meta);
  c["add_prefix_space"] = false;
  // The generic fast-tokenizer class loads tokenizer.json as written; model-specific classes of
  // transformers 5 rebuild parts of the pipeline (e.g. GPT2Tokenizer's pre-tokenizer).
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  return c;
}

namespace {

size_t utf8_chars(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

// transformers generate_merges(vocab, vocab_scores): for each token (in id order) every split
// into two tokens, ordered by the halves' ids; then all of them stably sorted by
// (score of the merged token, chars of left, chars of right), descending.
std::vector<std::pair<std::string, std::string>> merges_from_scores(const Vocab& v) {
  struct M {
    int32_t l, r;
    float score;
    size_t ll, lr;
  };
  std::vector<M> all;
  std::vector<M> local;
  for (int32_t id = 0; id < v.size(); ++id) {
    const std::string& s = v.tokens[id].text;
    local.clear();
    for (size_t k = 1; k < s.size(); ++k) {
      if ((static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) continue;  // split at character boundaries
      const int32_t l = v.find(std::string_view(s).substr(0, k));
      const int32_t r = l < 0 ? -1 : v.find(std::string_view(s).substr(k));
      if (l >= 0 && r >= 0)
        local.push_back({l, r, v.tokens[id].score, utf8_chars(v.tokens[l].text), utf8_chars(v.tokens[r].text)});
    }
    std::sort(local.begin(), local.end(), [](const M& a, const M& b) { return a.l != b.l ? a.l < b.l : a.r < b.r; });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const M& a, const M& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.ll != b.ll) return a.ll > b.ll;
    return a.lr > b.lr;
  });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(all.size());
  for (const M& m : all) out.emplace_back(v.tokens[m.l].text, v.tokens[m.r].text);
  return out;
}

}  // namespace

nlohmann::json SpmTokenizer::to_hf_tokenizer_json() const {
  if (meta.hf_tokenizer_json) return *meta.hf_tokenizer_json;
  json j = json::object();
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added_tokens(vocab);
  const json replace_space = {
      {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", std::string(kSpaceMarker)}};
  if (add_space_prefix) {
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "Prepend"}, {"prepend", std::string(kSpaceMarker)}}, replace_space}}};
  } else {
    j["normalizer"] = replace_space;
  }
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = (meta.add_bos || meta.add_eos) ? template_processing(vocab, meta) : json();
  json decoders = {{{"type", "Replace"}, {"pattern", {{"String", std::string(kSpaceMarker)}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}};
  if (add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  json merges_json = json::array();
  for (const auto& [a, b] : merges_from_scores(vocab)) merges_json.push_back({a, b});
  j["model"] = bpe_model(vocab, token_or_null(vocab, meta.unk), true, false, std::move(merges_json));
  return j;
}

nlohmann::json SpmTokenizer::to_hf_tokenizer_config() const {
  if (meta.hf_tokenizer_config) return *meta.hf_tokenizer_config;
  json c = base_config(vocab, meta);
  c["legacy"] = true;
  c["add_prefix_space"] = add_space_prefix;
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  return c;
}

}  // namespace qt::tok
