#include "formats/tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <map>

#include "formats/error.h"
#include "formats/tokenizer/unicode.h"

namespace qt::tok {

namespace {

// Unicode White_Space (25 code points): llama.cpp's unicode_set_whitespace, Oniguruma's \s.
constexpr const char* kWhiteSpace =
    R"(\t\n\x0B\f\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Per-thread matching state: PCRE2 match data and a JIT stack larger than the 32 KiB default, so
// long runs cannot exhaust it (the patterns here backtrack at most linearly).
struct MatchState {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    md = pcre2_match_data_create(16, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (mctx && stack) pcre2_jit_stack_assign(mctx, nullptr, stack);
  }
  ~MatchState() {
    if (stack) pcre2_jit_stack_free(stack);
    if (mctx) pcre2_match_context_free(mctx);
    if (md) pcre2_match_data_free(md);
  }
};

MatchState& match_state() {
  thread_local MatchState st;
  return st;
}

}  // namespace

std::string expand_whitespace_classes(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[i + 1];
      ++i;
      if (d == 's') {
        if (in_class) {
          out += kWhiteSpace;
        } else {
          out += '[';
          out += kWhiteSpace;
          out += ']';
        }
      } else if (d == 'S' && !in_class) {
        out += "[^";
        out += kWhiteSpace;
        out += ']';
      } else {
        out += c;
        out += d;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() {
    if (code) pcre2_code_free(code);
  }
};

RegexSplitter::RegexSplitter(std::vector<std::string> patterns, const std::string& where)
    : patterns_(std::move(patterns)) {
  for (const std::string& p : patterns_) {
    const std::string expanded = expand_whitespace_classes(p);
    int err = 0;
    PCRE2_SIZE erroff = 0;
    auto c = std::make_unique<Compiled>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expanded.data()), expanded.size(), PCRE2_UTF | PCRE2_UCP, &err,
                            &erroff, nullptr);
    if (!c->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      user_error("{}: bad pre-tokenizer regex '{}' at offset {}: {}", where, p, erroff,
                 reinterpret_cast<const char*>(msg));
    }
    // JIT is an optimisation: if it is unavailable the interpreter gives the same matches.
    c->jit = pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE) == 0;
    compiled_.push_back(std::move(c));
  }
}

RegexSplitter::~RegexSplitter() = default;

void RegexSplitter::split(std::string_view text, std::vector<Piece>* out) const {
  const size_t first_out = out->size();
  if (text.empty()) return;
  out->push_back({0, static_cast<uint32_t>(text.size())});
  if (compiled_.empty()) return;

  MatchState& st = match_state();
  std::vector<Piece> cur(out->begin() + first_out, out->end());
  std::vector<Piece> next;
  for (const auto& c : compiled_) {
    next.clear();
    next.reserve(cur.size() * 2);
    for (const Piece& pc : cur) {
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(text.data() + pc.begin);
      const size_t len = pc.end - pc.begin;
      size_t start = 0, last = 0;
      while (start <= len) {
        const int rc = c->jit ? pcre2_jit_match(c->code, subj, len, start, 0, st.md, st.mctx)
                              : pcre2_match(c->code, subj, len, start, PCRE2_NO_UTF_CHECK, st.md, st.mctx);
        // No match, or a resource limit: the rest of the piece stays one piece.
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
        const size_t ms = ov[0], me = ov[1];
        if (ms >= me) {  // empty match: step over one character, emit nothing
          if (ms >= len) break;
          start = ms + utf8_len(static_cast<uint8_t>(text[pc.begin + ms]));
          continue;
        }
        if (ms > last) next.push_back({pc.begin + uint32_t(last), pc.begin + uint32_t(ms)});
        next.push_back({pc.begin + uint32_t(ms), pc.begin + uint32_t(me)});
        last = start = me;
      }
      if (last < len) next.push_back({pc.begin + uint32_t(last), pc.end});
    }
    cur.swap(next);
  }
  out->resize(first_out);
  out->insert(out->end(), cur.begin(), cur.end());
}

bool pre_tokenizer_for_gguf(const std::string& pre, PreTokenizerSpec* spec) {
  using V = std::vector<std::string>;
  // Families as in llama.cpp's llm_tokenizer_bpe; the names map onto them below.
  static const std::map<std::string, PreTokenizerSpec> kFamilies = {
      {"gpt-2", {"gpt-2", "gpt-2", V{re::kGpt2LlamaCpp}, false, false}},
      {"mpt", {"mpt", "mpt", V{re::kGpt2LlamaCpp}, false, false}},
      {"starcoder", {"starcoder", "starcoder", V{re::kDigit, re::kGpt2LlamaCpp}, false, false}},
      {"refact", {"refact", "refact", V{re::kDigit, re::kGpt2LlamaCpp}, false, false}},
      {"smollm", {"smollm", "smollm", V{re::kDigit, re::kGpt2LlamaCpp}, false, false}},
      {"llama-bpe", {"llama-bpe", "llama-bpe", V{re::kLlama3LlamaCpp}, true, true}},
      {"dbrx", {"dbrx", "dbrx", V{re::kLlama3LlamaCpp}, false, false}},
      {"qwen2", {"qwen2", "qwen2", V{re::kQwen2LlamaCpp}, false, false}},
      {"falcon",
       {"falcon", "falcon", V{R"([\p{P}\$\+<=>\^~\|]+)", re::kGpt2LlamaCpp, "[0-9][0-9][0-9]"}, false, false}},
      {"deepseek-coder",
       {"deepseek-coder", "deepseek-coder",
        V{"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)",
          R"(\p{N})"},
        false, false}},
      {"default",
       {"default", "default", V{R"([\p{P}\$\+<=>\^~\|]+)", re::kGpt2LlamaCpp, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false,
        false}},
  };
  static const std::map<std::string, std::string> kAliases = {
      {"", "default"},
      {"default", "default"},
      {"gpt-2", "gpt-2"},
      {"phi-2", "gpt-2"},
      {"jina-es", "gpt-2"},
      {"jina-de", "gpt-2"},
      {"gigachat", "gpt-2"},
      {"jina-v2-es", "gpt-2"},
      {"jina-v2-de", "gpt-2"},
      {"a.x-4.0", "gpt-2"},
      {"mellum", "gpt-2"},
      {"modern-bert", "gpt-2"},
      {"olmo", "gpt-2"},
      {"jais", "gpt-2"},
      {"exaone4", "gpt-2"},
      {"trillion", "gpt-2"},
      {"granite-docling", "gpt-2"},
      {"mpt", "mpt"},
      {"starcoder", "starcoder"},
      {"refact", "refact"},
      {"smollm", "smollm"},
      {"command-r", "starcoder"},
      {"codeshell", "starcoder"},
      {"exaone", "starcoder"},
      {"minerva-7b", "starcoder"},
      {"mellum2", "starcoder"},
      {"llama3", "llama-bpe"},
      {"llama-v3", "llama-bpe"},
      {"llama-bpe", "llama-bpe"},
      {"falcon3", "llama-bpe"},
      {"falcon-h1", "llama-bpe"},
      {"pixtral", "llama-bpe"},
      {"midm-2.0", "llama-bpe"},
      {"lfm2", "llama-bpe"},
      {"jina-v5-nano", "llama-bpe"},
      {"dbrx", "dbrx"},
      {"smaug-bpe", "dbrx"},
      {"qwen2", "qwen2"},
      {"deepseek-r1-qwen", "qwen2"},
      {"kormo", "qwen2"},
      {"f2llmv2", "qwen2"},
      {"megrez", "qwen2"},
      {"stablelm2", "qwen2"},
      {"hunyuan", "qwen2"},
      {"solar-open", "qwen2"},
      {"falcon", "falcon"},
      {"deepseek-coder", "deepseek-coder"},
  };
  auto a = kAliases.find(pre);
  if (a == kAliases.end()) return false;
  *spec = kFamilies.at(a->second);
  spec->name = pre.empty() ? "default" : pre;
  return true;
}

}  // namespace qt::tok
