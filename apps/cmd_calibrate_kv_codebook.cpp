// calibrate --method kv-codebook: collect keys and values on the calibration text, train the
// method's tables (calib/kv_codebook.h), write them into the artifacts folder --out.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "calib/kv_codebook.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/mapped_file.h"
#include "libquant/kv/calibrated.h"
#include "libquant/kv/codec.h"
#include "libquant/kv/codecs.h"
#include "libquant/model/llama.h"

namespace qt {

int run_kv_codebook(const std::string& kv_text, const std::string& model_path, const std::string& text,
                    const std::string& out, int ctx, int chunks, uint64_t seed, const std::string& sides_text) {
  int sides = sides_text == "keys" ? 1 : sides_text == "values" ? 2 : sides_text == "both" ? 3 : 0;
  if (!sides) user_error("--kv-sides {}: not one of keys, values, both", sides_text);
  if (kv_text.empty())
    user_error("--method kv-codebook: give --kv METHOD[:bits=B] ({})", kv::calibrated_kv_method_names());
  const kv::KVSpec spec = kv::parse_kv_spec(kv_text, "--kv");
  if (!kv::kv_method_calibrated(spec.method))
    user_error("--kv {}: {} needs no calibration (calibrated methods: {})", kv_text, spec.method,
               kv::calibrated_kv_method_names());
  if (sides == 3 && kv::kv_method_sides(spec.method) == "k") sides = 1;  // the default "both" of a keys-only method
  if (spec.method == "commvq") calib::check_commvq_options(spec, sides);
  if (!std::filesystem::is_regular_file(text)) user_error("{}: no such file", text);
  if (text.find("test") != std::string::npos)
    std::fprintf(stderr, "warning: %s looks like test text; calibrate on wiki.valid.tokens.txt\n", text.c_str());
  if (std::filesystem::exists(out) && !std::filesystem::is_directory(out))
    user_error("--out {}: exists and is not a folder", out);
  Checkpoint ck = load_checkpoint(model_path);
  if (!ck.tokenizer) user_error("{}: the checkpoint has no tokenizer", model_path);
  MappedFile mf = map_file(text);
  const std::vector<int32_t> ids =
      ck.tokenizer->encode(std::string(reinterpret_cast<const char*>(mf.data), mf.size), true);
  const int32_t bos = ck.tokenizer->add_bos() ? ck.tokenizer->bos_id() : -1;
  LlamaModel model(std::move(ck), checkpoint_linear_factory(ck, {}));
  const bool tty = isatty(fileno(stderr));
  const auto t0 = std::chrono::steady_clock::now();
  std::fprintf(stderr, "kv-codebook: collecting keys and values, %d chunks of %d tokens\n", chunks, ctx);
  const calib::KvSamples s = calib::collect_kv_samples(model, ids, ctx, chunks, bos);
  std::fprintf(stderr,
               "kv-codebook: %lld vectors per layer, side and kv head (%d layers x %d kv heads x %d); training %s\n",
               (long long)s.n, s.layers, s.heads, s.dim, spec.text().c_str());
  calib::KvCodebookReport rep;
  int last = -1;
  const calib::NamedFloats tables = calib::train_kv_codebooks(s, spec, seed, sides, &rep, [&](int d, int t) {
    const int pct = 100 * d / t;
    if (tty)
      std::fprintf(stderr, "\r\033[Ktraining %d/%d", d, t);
    else if (pct / 10 != last / 10)
      std::fprintf(stderr, "kv-codebook: training %d%%\n", pct);
    last = pct;
    if (tty && d == t) std::fputc('\n', stderr);
  });
  const double bits = spec.number("bits", kv::kv_method_default_bits(spec.method), "--kv");
  const std::string prefix =
      spec.method == "commvq"
          ? kv::calibrated_prefix(
                kv::commvq_table_method(int(spec.number("cb", 8, "--kv")), spec.number("comm", 1, "--kv") != 0), bits)
          : kv::calibrated_prefix(spec.method, bits);
  calib::write_calibrated_artifacts(out, prefix, tables, s.dim, seed,
                                    {{"method", fmt::format("{}:bits={}", spec.method, bits)},
                                     {"sides", sides == 1   ? "keys"
                                               : sides == 2 ? "values"
                                                            : "both"},
                                     {"model", std::filesystem::path(model_path).filename().string()},
                                     {"text", std::filesystem::path(text).filename().string()},
                                     {"chunks", std::to_string(chunks)},
                                     {"ctx", std::to_string(ctx)},
                                     {"vectors", std::to_string(s.n)}});
  size_t floats = 0;
  for (auto& [n, v] : tables) floats += v.size();
  for (auto& l : rep.lines) fmt::print("{}\n", l);
  fmt::print(
      "kv-codebook    {} tables ({:.2f} MB of fp32; {:.2f} MB at fp16, counted once per model) from {} vectors "
      "per layer, side and kv head in {:.1f} s; written to {}/{}.safetensors (--artifacts {})\n",
      tables.size(), floats * 4 / 1e6, floats * 2 / 1e6, s.n,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), out, prefix, out);
  return 0;
}

}  // namespace qt
