// generate: greedy generation on SmolLM2 equals transformers' generate(do_sample=False) token for
// token (tests/golden/make_generate_golden.py), through the library loop and through the CLI's
// streamed text; the CLI's stop handling and bad-input errors.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/tokenizer/chat_prompt.h"
#include "libquant/eval/generate.h"
#include "libquant/model/llama.h"
#include "tests/support.h"

namespace qt {
namespace {

using nlohmann::json;

json golden() {
  std::ifstream f(test::source_dir() + "/tests/golden/generate/smollm2_greedy.json");
  return json::parse(f);
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs generate on the GGUF (its weights dequantized: the golden's model) and checks every token.
TEST(Generate, GreedyEqualsTransformers) {
  QT_REQUIRE_FILE(test::model_gguf());
  const json g = golden();
  Checkpoint ck = load_checkpoint(test::model_gguf());
  const std::shared_ptr<const Tokenizer> tok(std::move(ck.tokenizer));
  LlamaModel model(std::move(ck), checkpoint_linear_factory(ck, {}));
  for (const char* name : {"raw", "chat"}) {
    SCOPED_TRACE(name);
    const json& c = g["cases"][name];
    std::vector<int32_t> prompt;
    GenerateOptions o;
    o.max_tokens = g["meta"]["max_new_tokens"].get<int>();
    if (std::string(name) == "chat") {
      const std::string rendered = render_chat(*tok, nlohmann::ordered_json(c["messages"]), true);
      EXPECT_EQ(rendered, c["prompt"].get<std::string>());
      prompt = encode_chat(*tok, rendered);
      o.stop_ids = chat_stop_ids(*tok);
    } else {
      prompt = tok->encode(c["prompt"].get<std::string>(), true, true);
      o.stop_ids = {tok->eos_id()};
    }
    ASSERT_EQ(prompt, c["prompt_ids"].get<std::vector<int32_t>>());
    auto cache = model.make_cache(int(prompt.size()) + o.max_tokens);
    const GenerateResult r =
        generate(model_step(model, *cache), model.config().vocab, prompt, o, [](int32_t) { return true; });
    const auto want = c["generated"].get<std::vector<int32_t>>();
    const auto margins = c["margins"].get<std::vector<double>>();
    ASSERT_EQ(r.ids.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(r.ids[i], want[i]) << "token " << i << " (transformers' top-1 margin there: " << margins[i] << ")";
    EXPECT_EQ(r.stopped_by_token, want.back() == tok->eos_id());
  }
}

// The CLI prints the generated text (the golden ids decoded), nothing else, on stdout.
TEST(Generate, CliStreamsTheGoldenText) {
  QT_REQUIRE_FILE(test::model_gguf());
  const json g = golden();
  Checkpoint ck = load_checkpoint(test::model_gguf());
  for (const char* name : {"raw", "chat"}) {
    SCOPED_TRACE(name);
    const json& c = g["cases"][name];
    std::vector<int32_t> ids = c["generated"].get<std::vector<int32_t>>();
    if (ids.back() == ck.tokenizer->eos_id()) ids.pop_back();  // the stop token is not printed
    const std::string want = ck.tokenizer->decode(ids) + "\n";
    const std::string args = std::string(name) == "chat"
                                 ? " --chat --prompt " + shell_quote(c["messages"][0]["content"].get<std::string>())
                                 : " --prompt " + shell_quote(c["prompt"].get<std::string>());
    std::string out;
    ASSERT_EQ(test::run_cmd("(" + test::quanttool_bin() + " generate --model " + test::model_gguf() + args +
                                " --max-tokens 64 --threads 2 2>/dev/null)",
                            &out),
              0)
        << out;
    EXPECT_EQ(out, want);
  }
}

TEST(Generate, CliStopStringAndStats) {
  QT_REQUIRE_FILE(test::model_gguf());
  const json g = golden();
  const std::string prompt = g["cases"]["raw"]["prompt"].get<std::string>();
  std::string out;
  // The golden continuation is " with the founding of Rome in 753 BCE ...": stop at " 753".
  ASSERT_EQ(test::run_cmd(test::quanttool_bin() + " generate --model " + test::model_gguf() + " --prompt " +
                              shell_quote(prompt) + " --max-tokens 64 --threads 2 --stop ' 753' --kv f16",
                          &out),
            0)
      << out;
  EXPECT_EQ(out.rfind(" with the founding of Rome in\n", 0), 0u) << out;
  EXPECT_NE(out.find("(stop string)"), std::string::npos) << out;
  for (const char* key : {"prompt ", "first token", "generated ", "tok/s"})
    EXPECT_NE(out.find(key), std::string::npos) << key;
}

TEST(Generate, CliBadInput) {
  QT_REQUIRE_FILE(test::model_gguf());
  const std::string m = " generate --model " + test::model_gguf();
  for (const std::string& args :
       {m, m + " --prompt a --prompt-file b", m + " --prompt x --temp -1", m + " --prompt x --top-p 0",
        m + " --prompt-file /nonexistent", m + " --prompt x --kv nosuchmethod", m + " --prompt x --system s"}) {
    std::string out;
    EXPECT_EQ(test::run_cmd(test::quanttool_bin() + args, &out), 2) << args << "\n" << out;
    EXPECT_EQ(out.rfind("error:", 0), 0u) << args << "\n" << out;
  }
}

}  // namespace
}  // namespace qt
