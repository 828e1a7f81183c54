// quanttool convert --in MODEL --out DIR [--format hf] [--dtype bf16|f16|f32]
// Loads any checkpoint, writes it in an output layout. The output is built in a temporary
// sibling folder and renamed into place at the end, so --out is either absent, the old
// contents (on error), or complete.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "apps/command.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/layouts/hf.h"
#include "libquant/parallel.h"

namespace qt {
namespace {

namespace fs = std::filesystem;

struct ConvertOptions {
  DType dtype = DType::F32;
  uint64_t max_shard_bytes = 5'000'000'000ull;
};

// One row per output layout; later layouts (mlx, compressed-tensors, bnb, gguf) add a row, and
// quantization flags (--scheme, --bits, ...) reach their writer through ConvertOptions.
struct OutputLayout {
  const char* name;
  const char* help;
  void (*write)(const Checkpoint& ck, const std::string& dir, const ConvertOptions& opt);
};

void write_hf(const Checkpoint& ck, const std::string& dir, const ConvertOptions& opt) {
  HfWriteOptions o;
  o.dtype = opt.dtype;
  o.max_shard_bytes = opt.max_shard_bytes;
  write_hf_folder(ck, dir, o);
}

constexpr OutputLayout kLayouts[] = {
    {"hf", "Hugging Face folder: config.json, model.safetensors, tokenizer.json", write_hf},
};

const std::map<std::string, DType> kDTypes = {{"f32", DType::F32}, {"f16", DType::F16}, {"bf16", DType::BF16}};

// "5GB" (10^9, as huggingface_hub), "500MiB" (2^20), or plain bytes.
uint64_t parse_size(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    user_error("--max-shard-size: '{}' is not a size (e.g. 5GB, 500MiB)", s);
  }
  static const std::map<std::string, double> units = {
      {"", 1},      {"B", 1},        {"KB", 1e3},     {"MB", 1e6},      {"GB", 1e9},
      {"KiB", 1024}, {"MiB", 1 << 20}, {"GiB", 1 << 30}};
  auto it = units.find(s.substr(pos));
  if (it == units.end() || !(v > 0)) user_error("--max-shard-size: '{}' is not a size (e.g. 5GB, 500MiB)", s);
  return uint64_t(v * it->second);
}

bool is_nonempty(const fs::path& p) {
  if (!fs::exists(fs::symlink_status(p))) return false;
  if (!fs::is_directory(p)) return true;
  return fs::directory_iterator(p) != fs::directory_iterator();
}

struct Args {
  std::string in, out, format = "hf", dtype = "f32", max_shard = "5GB";
  bool force = false;
  int threads = 0;
};

int run(const Args& a) {
  auto t0 = std::chrono::steady_clock::now();
  set_threads(a.threads);
  const OutputLayout* layout = nullptr;
  for (auto& l : kLayouts)
    if (a.format == l.name) layout = &l;
  if (!layout) user_error("--format: unknown output layout '{}'", a.format);
  ConvertOptions opt;
  opt.dtype = kDTypes.at(a.dtype);
  opt.max_shard_bytes = parse_size(a.max_shard);

  // Refuse before doing any work: nothing is written when --out is taken.
  fs::path out = fs::absolute(a.out).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "dir/"
  std::error_code ec;
  if (fs::exists(a.in, ec) && fs::exists(out, ec) && fs::equivalent(a.in, out, ec))
    user_error("{}: --out is the input itself", a.out);
  if (is_nonempty(out) && !a.force)
    user_error("{}: already exists and is not empty (use --force to replace it)", a.out);

  Checkpoint ck = load_checkpoint(a.in);
  if (!ck.tokenizer) std::fprintf(stderr, "warning: %s has no tokenizer; the output will have none\n", a.in.c_str());
  auto t1 = std::chrono::steady_clock::now();

  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::current_path();
  fs::create_directories(parent, ec);
  if (ec) user_error("{}: cannot create folder: {}", parent.string(), ec.message());
  const std::string tag = "." + out.filename().string() + ".tmp-" + std::to_string(getpid());
  const fs::path tmp = parent / tag;
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec) user_error("{}: cannot create folder: {}", tmp.string(), ec.message());
  try {
    layout->write(ck, tmp.string(), opt);
    // Swap into place: the old --out (empty, or replaced with --force) goes only after the new
    // one is complete.
    fs::path old;
    if (fs::exists(fs::symlink_status(out))) {
      old = parent / ("." + out.filename().string() + ".old-" + std::to_string(getpid()));
      fs::rename(out, old);
    }
    fs::rename(tmp, out);
    if (!old.empty()) fs::remove_all(old, ec);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    user_error("{}: {}", a.out, e.code().message());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  auto t2 = std::chrono::steady_clock::now();

  uint64_t bytes = 0;
  int files = 0;
  for (auto& e : fs::directory_iterator(out)) {
    if (e.is_regular_file()) bytes += e.file_size(), ++files;
  }
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf("converted %s -> %s (%s, %s): %zu tensors, %d files, %.1f MB; load %.2f s, write %.2f s\n",
              a.in.c_str(), a.out.c_str(), layout->name, a.dtype.c_str(), ck.tensors.size(), files,
              bytes / 1e6, secs(t0, t1), secs(t1, t2));
  return 0;
}

const Registrar reg({"convert", "Convert a checkpoint (GGUF file or HF folder) into an output layout",
                     [](CLI::App& sub) -> std::function<int()> {
                       auto a = std::make_shared<Args>();
                       sub.add_option("--in", a->in, "input: a .gguf file or a Hugging Face folder")->required();
                       sub.add_option("--out", a->out, "output folder")->required();
                       std::vector<std::string> formats;
                       for (auto& l : kLayouts) formats.push_back(l.name);
                       sub.add_option("--format", a->format, "output layout")
                           ->check(CLI::IsMember(formats))
                           ->capture_default_str();
                       sub.add_option("--dtype", a->dtype, "dtype of float tensors")
                           ->check(CLI::IsMember({"bf16", "f16", "f32"}))
                           ->capture_default_str();
                       sub.add_option("--max-shard-size", a->max_shard, "shard the weights above this size")
                           ->capture_default_str();
                       sub.add_flag("--force", a->force, "replace an existing non-empty --out");
                       sub.add_option("--threads", a->threads, "threads (default: all cores)");
                       return [a] { return run(*a); };
                     }});

}  // namespace
}  // namespace qt
