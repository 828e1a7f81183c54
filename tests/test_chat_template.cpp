// The chat template renderer against Jinja2 as transformers configures it (tests/golden/
// make_generate_golden.py: SmolLM2's template through apply_chat_template, ChatML / Llama-3 /
// Qwen2.5 / a feature sampler through transformers' renderer); the sampler against hand-computed
// distributions; the streaming detokenizer's UTF-8 and stop-string hold-back.
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/tokenizer/chat_template.h"
#include "formats/tokenizer/text_stream.h"
#include "libquant/eval/sampling.h"
#include "tests/support.h"

namespace qt {
namespace {

using json = nlohmann::ordered_json;

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string render(const std::string& src, const json& ctx = json::object()) { return ChatTemplate(src).render(ctx); }

TEST(ChatTemplate, MatchesTransformers) {
  const std::string dir = test::source_dir() + "/tests/golden/generate/";
  const json g = json::parse(read(dir + "chat_templates.json"));  // ordered: dicts keep their key order
  for (auto& [name, t] : g["templates"].items()) {
    const std::string src = t.contains("template") ? t["template"].get<std::string>() : read(dir + "templates/" + name);
    const ChatTemplate tpl(src);
    for (const json& c : t["conversations"]) {
      SCOPED_TRACE(name + ": " + c["messages"].dump());
      json ctx = {{"messages", c["messages"]},
                  {"add_generation_prompt", c["add_generation_prompt"]},
                  {"bos_token", g["bos_token"]},
                  {"eos_token", g["eos_token"]}};
      if (c.contains("tools")) ctx["tools"] = c["tools"];
      EXPECT_EQ(tpl.render(ctx), c["rendered"].get<std::string>());
    }
  }
}

TEST(ChatTemplate, TheGgufCarriesSmolLM2sTemplate) {
  QT_REQUIRE_FILE(test::model_gguf());
  const json g = json::parse(read(test::source_dir() + "/tests/golden/generate/chat_templates.json"));
  const Checkpoint ck = load_checkpoint(test::model_gguf());
  EXPECT_EQ(ck.tokenizer->chat_template(), g["templates"]["smollm2"]["template"].get<std::string>());
}

// Jinja's whitespace rules under trim_blocks + lstrip_blocks, worked out by hand.
TEST(ChatTemplate, Whitespace) {
  EXPECT_EQ(render("{% if true %}\n  x\n{% endif %}\nafter"), "  x\nafter");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}"), "a\nb");
  EXPECT_EQ(render("x\n    {% if true %}y{% endif %}"), "x\ny");
  EXPECT_EQ(render("x {% if true %}y{% endif %}"), "x y");  // not at a line start: kept
  EXPECT_EQ(render("{# note #}\nz"), "z");
  EXPECT_EQ(render("{%+ if true %}y{% endif %}"), "y");
}

TEST(ChatTemplate, Expressions) {
  const json ctx = {{"xs", {1, 2, 3}}, {"d", {{"k", "v"}}}, {"s", "  hi  "}};
  EXPECT_EQ(render("{{ xs[1:] }} {{ xs[::-1] }} {{ xs[-1] }} {{ xs|length }}", ctx), "[2, 3] [3, 2, 1] 3 3");
  EXPECT_EQ(render("{{ d.k ~ d['k'] }} {{ d.missing is defined }} {{ 'k' in d }} {{ 4 not in xs }}", ctx),
            "vv False True True");
  EXPECT_EQ(render("{{ s|trim }}|{{ s.strip() }}|{{ 'a' + 'b' }}|{{ 1 + 2 * 3 }}|{{ 7 // -2 }}|{{ 2 ~ 3 }}", ctx),
            "hi|hi|ab|7|-4|23");
  EXPECT_EQ(render("{% for a, b in d|items %}{{ a }}={{ b }}{% endfor %}", ctx), "k=v");
  EXPECT_EQ(render("{% for x in [] %}y{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% set n = 1 %}{% for x in xs %}{% set n = x %}{% endfor %}{{ n }}", ctx), "1");  // loop scope
  EXPECT_EQ(render("{{ d|tojson }} {{ xs|tojson(indent=1) }}", ctx), "{\"k\": \"v\"} [\n 1,\n 2,\n 3\n]");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ undefined_name }}|{{ 'x' if false }}|{{ 1 if 0 else 2 }}"),
            "None True |"
            "|2");
}

TEST(ChatTemplate, ErrorsAreUserErrors) {
  for (const char* bad : {"{% macro f() %}{% endmacro %}", "{% for m in messages %}", "{% endif %}", "{{ x ** 2 }}",
                          "{{ 'a' ", "{{ {'a': 1} }}", "{% if x %}{% else %}{% else %}{% endif %}"})
    EXPECT_THROW(ChatTemplate{bad}, UserError) << bad;
  EXPECT_THROW(render("{{ 'a' | nosuchfilter }}"), UserError);
  EXPECT_THROW(render("{{ 'a' + 1 }}"), UserError);
  EXPECT_THROW(render("{{ nothing.attr }}"), UserError);
  try {
    render("{{ raise_exception('roles must alternate') }}");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("roles must alternate"), std::string::npos);
  }
}

TEST(Sampling, GreedyIsArgmaxLowestIdOnTies) {
  const float l[] = {1, 3, 3, 2};
  EXPECT_EQ(argmax_token(l, 4), 1);
  Sampler s({});
  EXPECT_EQ(s.sample(l, 4), 1);
  SamplingOptions k1;
  k1.temperature = 1, k1.top_k = 1, k1.seed = 7;
  Sampler s1(k1);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s1.sample(l, 4), 1);
}

// Frequencies over many draws against the hand-computed probabilities.
std::map<int, double> freq(const SamplingOptions& o, const std::vector<float>& logits, int n = 20000) {
  Sampler s(o);
  std::map<int, double> f;
  for (int i = 0; i < n; ++i) f[s.sample(logits.data(), int(logits.size()))] += 1.0 / n;
  return f;
}

TEST(Sampling, TemperatureTopKTopP) {
  const std::vector<float> two = {0.f, std::log(3.f)};  // p = 1/4, 3/4 at T = 1
  SamplingOptions o;
  o.temperature = 1, o.seed = 1;
  EXPECT_NEAR(freq(o, two)[1], 0.75, 0.015);
  o.temperature = 2;  // p ∝ 1, √3
  EXPECT_NEAR(freq(o, two)[1], std::sqrt(3.0) / (1 + std::sqrt(3.0)), 0.015);
  const std::vector<float> three = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  o.temperature = 1, o.top_p = 0.5f;  // the top token alone reaches 0.5
  EXPECT_NEAR(freq(o, three)[0], 1.0, 1e-12);
  o.top_p = 0.6f;  // 0.5 + 0.3: renormalized 5/8, 3/8
  auto f = freq(o, three);
  EXPECT_NEAR(f[0], 0.625, 0.015);
  EXPECT_EQ(f.count(2), 0u);
  o.top_p = 1, o.top_k = 2;  // the same two by count
  EXPECT_NEAR(freq(o, three)[0], 0.625, 0.015);
  o.top_k = 0;
  f = freq(o, three);
  EXPECT_NEAR(f[2], 0.2, 0.015);
}

TEST(Sampling, SeededAndChecked) {
  const std::vector<float> l = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  SamplingOptions o;
  o.temperature = 1, o.seed = 42;
  Sampler a(o), b(o);
  o.seed = 43;
  Sampler c(o);
  bool differs = false;
  for (int i = 0; i < 64; ++i) {
    const int x = a.sample(l.data(), 5);
    EXPECT_EQ(x, b.sample(l.data(), 5));
    differs = differs || x != c.sample(l.data(), 5);
  }
  EXPECT_TRUE(differs);
  SamplingOptions bad;
  bad.temperature = -1;
  EXPECT_THROW(check_sampling_options(bad), UserError);
  bad = {}, bad.top_p = 0;
  EXPECT_THROW(check_sampling_options(bad), UserError);
  bad = {}, bad.top_k = -2;
  EXPECT_THROW(check_sampling_options(bad), UserError);
}

TEST(TextStream, Utf8Tail) {
  EXPECT_EQ(utf8_incomplete_tail("a\xC3"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xC3\xA9"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x99"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x99\x82"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
}

// Token by token, every released piece is whole UTF-8 and the pieces add up to the text.
TEST(TextStream, ReleasesWholeCharactersAndStops) {
  QT_REQUIRE_FILE(test::model_gguf());
  const Checkpoint ck = load_checkpoint(test::model_gguf());
  const Tokenizer& tok = *ck.tokenizer;
  const std::string text = "Caf\xC3\xA9 \xE6\xBC\xA2\xE5\xAD\x97 \xF0\x9F\x99\x82 done. Stop here, then more.";
  const std::vector<int32_t> ids = tok.encode(text, false);
  TextStream all(tok, {});
  std::string got;
  for (int32_t id : ids) {
    const std::string piece = all.push(id);
    EXPECT_EQ(utf8_incomplete_tail(piece), 0u) << got;
    got += piece;
  }
  got += all.finish();
  EXPECT_EQ(got, text);
  TextStream stop(tok, {"Stop here", "never"});
  got.clear();
  for (int32_t id : ids) {
    got += stop.push(id);
    if (stop.stopped()) break;
  }
  EXPECT_TRUE(stop.stopped());
  EXPECT_EQ(got, "Caf\xC3\xA9 \xE6\xBC\xA2\xE5\xAD\x97 \xF0\x9F\x99\x82 done. ");
  EXPECT_EQ(stop.finish(), "");
}

}  // namespace
}  // namespace qt
