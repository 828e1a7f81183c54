#include "formats/tokenizer/chat_prompt.h"

#include <algorithm>

#include "formats/error.h"
#include "formats/tokenizer/chat_template.h"

namespace qt {
namespace {

std::string token_text(const Tokenizer& tok, int id) {
  return id >= 0 && id < tok.vocab_size() ? tok.decode({id}) : std::string();
}

}  // namespace

std::string render_chat(const Tokenizer& tok, const nlohmann::ordered_json& messages, bool add_generation_prompt) {
  const std::string src = tok.chat_template();
  if (src.empty()) user_error("--chat: the model has no chat template (tokenizer.chat_template / chat_template)");
  const ChatTemplate t(src);
  return t.render({{"messages", messages},
                   {"add_generation_prompt", add_generation_prompt},
                   {"bos_token", token_text(tok, tok.bos_id())},
                   {"eos_token", token_text(tok, tok.eos_id())}});
}

std::vector<int32_t> encode_chat(const Tokenizer& tok, const std::string& rendered) {
  return tok.encode(rendered, false, true);
}

std::vector<int32_t> chat_stop_ids(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  if (tok.eos_id() >= 0) ids.push_back(tok.eos_id());
  const std::string src = tok.chat_template();
  for (const char* marker : {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"}) {
    if (src.find(marker) == std::string::npos) continue;
    const std::vector<int32_t> m = tok.encode(marker, false, true);
    if (m.size() == 1 && std::find(ids.begin(), ids.end(), m[0]) == ids.end()) ids.push_back(m[0]);
  }
  return ids;
}

}  // namespace qt
