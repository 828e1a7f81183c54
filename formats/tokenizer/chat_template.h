// A model's chat template (tokenizer_config.json "chat_template", GGUF tokenizer.chat_template)
// rendered the way transformers' apply_chat_template renders it: Jinja2 with trim_blocks and
// lstrip_blocks (transformers/utils/chat_template_utils.py, _compile_jinja_template). The subset
// real templates use (SmolLM2, ChatML, Llama-3, Qwen2.5): {{ }}, {% if/elif/else %}, {% for %}
// (loop.first/last/index/index0/length, `for a, b in`), {% set %}, comments, whitespace control
// {%- -%} {{- -}}; literals, [..] and .attr access, slices, + - * / // % ~, comparisons, and / or /
// not / in, `x if c else y`, filters (trim, length, tojson, upper, lower, string, items, first,
// last, join, default), tests (defined, none, string, ...), a few str/dict methods (strip,
// startswith, split, get, ...) and raise_exception(). Anything else is a UserError naming it.
// Values are nlohmann::ordered_json, so dicts keep their keys in insertion order as Python's do
// (tojson of a tool's schema prints them as given).
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace qt {

namespace chat_detail {
struct Program;
}

class ChatTemplate {
 public:
  // Parses `source`; UserError on syntax outside the subset (with the offending piece).
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  // `context`: the template's variables, e.g. {"messages": [{"role": "user", "content": "Hi"}],
  // "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"}. UserError from
  // raise_exception() or a type error (adding a string to a number, indexing an undefined value).
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::unique_ptr<chat_detail::Program> prog_;
};

}  // namespace qt
