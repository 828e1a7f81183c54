// quanttool tokenize --model PATH --text FILE [--out IDS] [--add-special]
// Token ids of a text file, one per line: the model's own tokenizer (GGUF metadata or the HF
// folder's tokenizer.json), for comparisons with transformers / tokenizers / llama.cpp.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "apps/command.h"
#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/mapped_file.h"
#include "formats/tokenizer/tokenizer.h"

namespace qt {
namespace cmd_tokenize {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model) {
  if (fs::is_directory(model)) {
    if (!fs::exists(fs::path(model) / "tokenizer.json")) user_error("{}: no tokenizer.json", model);
    return tokenizer_from_hf_dir(model);
  }
  if (!fs::exists(model)) user_error("{}: no such file or folder", model);
  GgufFile g = GgufFile::open(model);
  if (!g.has("tokenizer.ggml.model")) user_error("{}: has no tokenizer (no tokenizer.ggml.model)", model);
  return tokenizer_from_gguf(g);
}

struct Args {
  std::string model, text, out;
  bool add_special = false;
};

int run(const Args& a) {
  auto tok = load_tokenizer(a.model);
  MappedFile mf = map_file(a.text);
  std::string_view text(reinterpret_cast<const char*>(mf.data), mf.size);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = tok->encode(text, a.add_special);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string s;
  s.reserve(ids.size() * 6);
  for (int32_t id : ids) {
    s += std::to_string(id);
    s += '\n';
  }
  if (a.out.empty() || a.out == "-") {
    std::fwrite(s.data(), 1, s.size(), stdout);
  } else {
    write_file_atomic(a.out, s.data(), s.size());
  }
  std::fprintf(stderr, "%zu tokens from %zu bytes in %.3f s (%s)\n", ids.size(), mf.size, secs, tok->kind().c_str());
  return 0;
}

const Registrar reg({"tokenize", "Token ids of a text file, one per line", [](CLI::App& sub) -> std::function<int()> {
                       auto a = std::make_shared<Args>();
                       sub.add_option("--model", a->model, "a .gguf file or a Hugging Face folder")->required();
                       sub.add_option("--text", a->text, "UTF-8 text file")->required();
                       sub.add_option("--out", a->out, "output file (default: stdout)");
                       sub.add_flag("--add-special", a->add_special, "add BOS/EOS as the model's tokenizer says");
                       return [a] { return run(*a); };
                     }});

}  // namespace cmd_tokenize
}  // namespace qt
