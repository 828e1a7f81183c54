// A conversation turned into the model's prompt with its chat template, as transformers'
// apply_chat_template(messages, add_generation_prompt=True) does, and the tokens that end an
// assistant turn (generation stops at them).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/tokenizer/tokenizer.h"

namespace qt {

// messages: [{"role": ..., "content": ...}, ...]. The template sees messages,
// add_generation_prompt, bos_token and eos_token. UserError when the tokenizer has no template.
std::string render_chat(const Tokenizer& tok, const nlohmann::ordered_json& messages, bool add_generation_prompt);

// The rendered text's ids: special tokens written in it are matched, nothing is added (the
// template writes BOS itself where the model wants it), as apply_chat_template(tokenize=True).
std::vector<int32_t> encode_chat(const Tokenizer& tok, const std::string& rendered);

// EOS, plus the end-of-turn markers the template writes (<|im_end|>, <|eot_id|>, <|end|>,
// <end_of_turn>, <|endoftext|>) that are single tokens of this vocabulary.
std::vector<int32_t> chat_stop_ids(const Tokenizer& tok);

}  // namespace qt
