// The fields of a SentencePiece tokenizer.model that a GGUF vocabulary needs, read straight from
// its protobuf encoding (sentencepiece/src/sentencepiece_model.proto): ModelProto.pieces (field 1;
// each SentencePiece: piece = 1, score = 2, type = 3) and normalizer_spec.add_dummy_prefix (field
// 3, then 3). Every other field is skipped. Internal to formats/tokenizer.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/tokenizer/tokenizer.h"

namespace qt::tok {

struct SentencePieceModel {
  // SentencePiece.Type: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, BYTE 6, UNUSED 5 (the same
  // numbers as GGUF's token types).
  struct Piece {
    std::string text;
    float score = 0.0f;
    int32_t type = 1;
  };
  std::vector<Piece> pieces;
  bool add_dummy_prefix = true;
};

// UserError naming `where` on a truncated or malformed message.
SentencePieceModel parse_sentencepiece_model(std::string_view bytes, const std::string& where);
SentencePieceModel read_sentencepiece_model(const std::string& path);

// tokens, scores and token types as convert_hf_to_gguf.py writes them for an HF folder `dir` that
// holds a tokenizer.model (formats/tokenizer/export_gguf_spm.cpp). `n_vocab`: the config's
// vocab_size (0: the model's piece count); `gguf_arch`: "phi3" follows Phi3MiniModel.set_vocab,
// anything else TextModel._set_vocab_sentencepiece. `tokenizer_json` / `tokenizer_config`: the
// folder's files as read (null when absent). Only model, pre and the token lists are filled.
GgufTokenizerMeta gguf_vocab_from_sentencepiece(const std::string& dir, int64_t n_vocab, const std::string& gguf_arch,
                                                const nlohmann::json& tokenizer_json,
                                                const nlohmann::json& tokenizer_config);
// add_bos / add_eos / add_sep as gguf.SpecialVocab decides them from tokenizer.json's
// post-processor and tokenizer_config.json's add_<kind>_token; the others are marked unwritten.
void special_vocab_add_flags(const nlohmann::json& tokenizer_json, const nlohmann::json& tokenizer_config,
                             GgufTokenizerMeta* m);

}  // namespace qt::tok
