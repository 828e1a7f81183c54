// One Tokenizer interface for byte-level BPE (GPT-2 family, SmolLM2, Llama-3, Qwen2) and
// SentencePiece-style BPE with byte fallback (Llama-2, Mistral, Phi-3). FORMATS.md 2.8-2.9, 7.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace qt {

class GgufFile;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // add_special: prepend BOS / append EOS as the model's configuration says (add_bos/add_eos).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int vocab_size() const = 0;
  virtual std::string kind() const = 0;  // e.g. "bpe (smollm)", "spm"
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual bool add_bos() const = 0;
  // A HF tokenizer.json and tokenizer_config.json describing this tokenizer (for convert).
  virtual nlohmann::json to_hf_tokenizer_json() const = 0;
  virtual nlohmann::json to_hf_tokenizer_config() const = 0;
};

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& g);
// From a HF folder (tokenizer.json, plus tokenizer_config.json for BOS/EOS handling).
std::unique_ptr<Tokenizer> tokenizer_from_hf_dir(const std::string& dir);

}  // namespace qt
