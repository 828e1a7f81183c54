// SentencePiece-style BPE as llama.cpp runs it for `tokenizer.ggml.model = llama` (Llama-2,
// Mistral, Phi-3): spaces become '▁', a space is prepended at the start and after each special
// token (add_space_prefix), then adjacent pieces are merged greedily by the score of the merged
// token (llm_tokenizer_spm_session); characters that end up outside the vocabulary become
// <0xXX> byte tokens. Internal to formats/tokenizer.
#pragma once
#include <unordered_set>

#include "formats/tokenizer/vocab.h"

namespace qt::tok {

class SpmTokenizer : public TokenizerBase {
 public:
  bool add_space_prefix = true;
  std::string general_name;  // GGUF general.name (llama.cpp keys phi-3 special-token flags on it)

  void finalize();  // byte-token map, adjacent-symbol pairs

  std::string kind() const override { return "spm"; }
  nlohmann::json to_hf_tokenizer_json() const override;
  nlohmann::json to_hf_tokenizer_config() const override;

 protected:
  void encode_fragment(std::string_view text, bool after_special, bool at_start,
                       std::vector<int32_t>* out) const override;
  void append_piece(int32_t id, bool first, std::string* out) const override;

 private:
  int32_t byte_token(uint8_t b) const;
  void encode_segment(std::string_view text, const uint32_t* starts, size_t n, std::vector<int32_t>* out) const;
  int32_t byte_tokens_[256];
  // Pairs of adjacent symbols (packed bytes) that occur inside some token. Between two symbols
  // that form no such pair no merge can ever happen, so the text splits there into segments that
  // are merged independently: the same result as one queue over the whole fragment, far faster.
  std::unordered_set<uint64_t> pairs_;
};

}  // namespace qt::tok
