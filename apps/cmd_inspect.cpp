// quanttool inspect PATH [--json FILE]: what a checkpoint holds — architecture, sizes, parameter
// count, tokenizer, and a table of its tensors as stored (for GGUF: the file's own names and ggml
// types, nothing dequantized), with totals and bits per weight. Quantized folders (mlx, native)
// also get their quantization: per role the common scheme/bits/group and the exceptions, the
// weights stored unquantized and why, and bits per weight counting quantized weights by their
// logical size.
#include <cstdio>
#include <filesystem>
#include <map>

#include "apps/command.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/layouts/quantized.h"
#include "formats/mapped_file.h"
#include "libquant/schemes/packed_io.h"

namespace qt {
namespace cmd_inspect {

namespace fs = std::filesystem;
using nlohmann::json;

struct Row {
  std::string name, type;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  int64_t numel = 0;
};

struct Summary {
  std::string path, format;
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<Row> rows;
  json quantization;        // normalized description (quantized folders only)
  double weight_bpw = 0.0;  // checkpoint_bits_per_weight
  std::string multimodal;   // a vision-language folder: what convert carries through untouched
};

// "model.layers.7.mlp.up_proj.weight" -> "mlp.up_proj.weight": what a weight does, not where.
std::string role_of(const std::string& name) {
  static const std::string kPrefix = "model.layers.";
  if (name.rfind(kPrefix, 0) != 0) return name;
  size_t dot = name.find('.', kPrefix.size());
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

std::string params_str(const json& e) {
  return fmt::format("{} {}-bit, group {}", e.value("scheme", "?"), e.value("bits", 0), e.value("group_size", 0));
}

// Per role: the most common parameters; every weight that differs is listed as an exception.
void print_quantization(const Summary& s) {
  const json& q = s.quantization;
  std::printf("  quantization  %s: %zu weights quantized, %zu stored unquantized; %.3f bits per weight\n",
              q.value("format", "?").c_str(), q["tensors"].size(), q.value("skipped", json::object()).size(),
              s.weight_bpw);
  std::map<std::string, std::map<std::string, std::vector<std::string>>> roles;  // role -> params -> names
  for (auto& [name, e] : q["tensors"].items()) roles[role_of(name)][params_str(e)].push_back(name);
  for (auto& [role, by] : roles) {
    auto common = by.begin();
    size_t n = 0;
    for (auto it = by.begin(); it != by.end(); ++it) {
      n += it->second.size();
      if (it->second.size() > common->second.size()) common = it;
    }
    std::printf("    %-34s %-24s (%zu)\n", role.c_str(), common->first.c_str(), n);
    for (auto& [params, names] : by)
      if (params != common->first)
        for (auto& nm : names) std::printf("      except %s: %s\n", nm.c_str(), params.c_str());
  }
  const json skipped = q.value("skipped", json::object());  // a copy: items() must not outlive it
  for (auto& [name, why] : skipped.items())
    std::printf("    unquantized %s: %s\n", name.c_str(), why.get<std::string>().c_str());
}

bool is_gguf_file(const std::string& path) {
  if (!fs::is_regular_file(path)) return false;
  if (fs::path(path).extension() == ".gguf") return true;
  MappedFile mf = map_file(path);
  return mf.size >= 4 && std::string_view(reinterpret_cast<const char*>(mf.data), 4) == "GGUF";
}

Summary from_gguf(const std::string& path) {
  GgufFile g = GgufFile::open(path);
  Summary s;
  s.path = path;
  s.format = fmt::format("gguf v{}", g.version());
  if (g.has("general.file_type")) s.format += fmt::format(", file type {}", g.get_int("general.file_type"));
  s.config = ModelConfig::from_gguf(g);
  if (g.has("tokenizer.ggml.model")) s.tokenizer = tokenizer_from_gguf(g);
  for (auto& t : g.tensors()) {
    const GgmlTypeRow* r = ggml_type_row(uint32_t(t.type));
    s.rows.push_back({t.name, r ? r->name : "?", t.torch_shape(), t.nbytes, t.numel()});
  }
  return s;
}

std::string grouped(uint64_t v) {  // 134515008 -> 134,515,008
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

Summary from_checkpoint(const std::string& path) {
  Checkpoint ck = load_checkpoint(path);
  Summary s;
  s.path = path;
  s.format = ck.source_kind;
  s.config = ck.config;
  s.tokenizer = std::move(ck.tokenizer);
  for (auto& [name, t] : ck.tensors) s.rows.push_back({name, dtype_name(t.dtype), t.shape, t.nbytes, t.numel()});
  if (const Multimodal* mm = ck.multimodal.get()) {
    uint64_t bytes = 0;
    for (auto& [name, t] : mm->passthrough) bytes += t.nbytes;
    const json& arch = mm->config.contains("architectures") ? mm->config["architectures"] : json();
    s.multimodal = fmt::format(
        "{}: the language model above (stored under {}*); {} vision / projector tensors, {} "
        "bytes, kept as they are",
        arch.is_array() && !arch.empty() && arch[0].is_string() ? arch[0].get<std::string>()
                                                                : mm->config.value("model_type", "?"),
        mm->lm_prefix, mm->passthrough.size(), grouped(bytes));
  }
  if (ck.quantization.is_object() && ck.quantization.contains("tensors")) {
    s.quantization = ck.quantization;
    s.weight_bpw = checkpoint_bits_per_weight(ck);
  }
  return s;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int run(const std::string& path, const std::string& json_path) {
  if (!fs::exists(path)) user_error("{}: no such file or folder", path);
  Summary s = is_gguf_file(path) ? from_gguf(path) : from_checkpoint(path);
  const ModelConfig& c = s.config;

  uint64_t total_bytes = 0;
  int64_t total_numel = 0;
  std::map<std::string, std::tuple<int, uint64_t, int64_t>> by_type;  // count, bytes, numel
  for (auto& r : s.rows) {
    total_bytes += r.bytes;
    total_numel += r.numel;
    auto& [n, b, e] = by_type[r.type];
    ++n, b += r.bytes, e += r.numel;
  }
  const double bpw = total_numel ? 8.0 * double(total_bytes) / double(total_numel) : 0.0;
  json hf = c.to_hf_json();

  std::string rope = fmt::format("theta {}", c.rope_theta);
  if (c.rope_scaling.type.empty()) {
    rope += ", no scaling";
  } else {
    rope += fmt::format(", {} scaling x{}", c.rope_scaling.type, c.rope_scaling.factor);
  }
  std::printf("%s\n", s.path.c_str());
  std::printf("  format        %s\n", s.format.c_str());
  std::printf("  architecture  %s (%s)%s%s\n", c.arch.c_str(), hf["architectures"][0].get<std::string>().c_str(),
              c.attention_bias ? ", q/k/v bias" : "", c.desc().qk_norm != QkNorm::None ? ", q/k norm" : "");
  std::printf("  shape         %d layers, hidden %d, intermediate %d, %d heads / %d kv heads, head_dim %d\n",
              c.n_layers, c.hidden, c.intermediate, c.n_heads, c.n_kv_heads, c.head_dim);
  std::printf("  rope          %s; rms_norm_eps %g; context %d\n", rope.c_str(), c.rms_eps, c.max_position);
  if (c.desc().gemma_attention) {  // what the Gemma block adds
    int n_sliding = 0;
    for (int i = 0; i < c.n_layers; ++i) n_sliding += c.is_sliding(i);
    std::string caps = c.attn_softcap > 0 ? fmt::format("attention {}", c.attn_softcap) : "attention none";
    caps += c.final_softcap > 0 ? fmt::format(", logits {}", c.final_softcap) : ", logits none";
    std::string local = c.rope_local_theta > 0 ? fmt::format(" (local rope theta {})", c.rope_local_theta) : "";
    std::printf("  gemma         sliding window %d on %d of %d layers%s; soft-caps: %s; query_pre_attn_scalar %g\n",
                c.sliding_window, n_sliding, c.n_layers, local.c_str(), caps.c_str(), c.query_pre_attn_scalar);
  }
  if (!c.no_rope.empty()) {
    int n = 0;
    for (int i = 0; i < c.n_layers; ++i) n += !c.has_rope(i);
    std::printf("  no rope       on %d of %d layers\n", n, c.n_layers);
  }
  if (c.is_moe()) {
    int n_sparse = 0;
    for (int i = 0; i < c.n_layers; ++i) n_sparse += c.is_moe_layer(i);
    std::printf("  experts       %d of %d rows on %d of %d layers, top %d per token%s\n", c.n_experts,
                c.moe_intermediate, n_sparse, c.n_layers, c.n_experts_per_tok,
                c.norm_topk_prob ? " (weights renormalised)" : "");
  }
  std::printf("  vocabulary    %d, %s embeddings\n", c.vocab, c.tie_word_embeddings ? "tied" : "separate");
  std::printf("  parameters    %s (%.1f M)\n", grouped(c.n_params()).c_str(), c.n_params() / 1e6);
  if (s.tokenizer) {
    std::printf("  tokenizer     %s, %d tokens, bos %d (%s), eos %d\n", s.tokenizer->kind().c_str(),
                s.tokenizer->vocab_size(), s.tokenizer->bos_id(), s.tokenizer->add_bos() ? "added" : "not added",
                s.tokenizer->eos_id());
  } else {
    std::printf("  tokenizer     none\n");
  }
  if (!s.multimodal.empty()) std::printf("  multimodal    %s\n", s.multimodal.c_str());
  if (s.quantization.is_object()) print_quantization(s);

  size_t w_name = 4, w_type = 4, w_shape = 5;
  for (auto& r : s.rows) {
    w_name = std::max(w_name, r.name.size());
    w_type = std::max(w_type, r.type.size());
    w_shape = std::max(w_shape, shape_str(r.shape).size());
  }
  std::printf("\n  %-*s  %-*s  %-*s  %14s\n", int(w_name), "name", int(w_type), "type", int(w_shape), "shape", "bytes");
  for (auto& r : s.rows)
    std::printf("  %-*s  %-*s  %-*s  %14s\n", int(w_name), r.name.c_str(), int(w_type), r.type.c_str(), int(w_shape),
                shape_str(r.shape).c_str(), grouped(r.bytes).c_str());
  std::printf("\n");
  for (auto& [type, v] : by_type) {
    auto& [n, b, e] = v;
    std::printf("  %-6s %4d tensors  %14s bytes  %6.3f bits per weight\n", type.c_str(), n, grouped(b).c_str(),
                e ? 8.0 * double(b) / double(e) : 0.0);
  }
  std::printf("  total  %4zu tensors  %14s bytes  %6.3f bits per weight  (%s weights)\n", s.rows.size(),
              grouped(total_bytes).c_str(), bpw, grouped(uint64_t(total_numel)).c_str());

  if (!json_path.empty()) {
    json j;
    j["path"] = s.path;
    j["format"] = s.format;
    j["architecture"] = c.arch;
    j["config"] = hf;
    j["parameters"] = c.n_params();
    if (s.tokenizer) {
      j["tokenizer"] = {{"kind", s.tokenizer->kind()},
                        {"vocab_size", s.tokenizer->vocab_size()},
                        {"bos_id", s.tokenizer->bos_id()},
                        {"eos_id", s.tokenizer->eos_id()},
                        {"add_bos", s.tokenizer->add_bos()}};
    } else {
      j["tokenizer"] = nullptr;
    }
    j["tensors"] = json::array();
    for (auto& r : s.rows)
      j["tensors"].push_back({{"name", r.name}, {"type", r.type}, {"shape", r.shape}, {"bytes", r.bytes}});
    j["by_type"] = json::object();
    for (auto& [type, v] : by_type) {
      auto& [n, b, e] = v;
      j["by_type"][type] = {{"tensors", n}, {"bytes", b}, {"elements", e}};
    }
    j["totals"] = {
        {"tensors", s.rows.size()}, {"bytes", total_bytes}, {"elements", total_numel}, {"bits_per_weight", bpw}};
    if (s.quantization.is_object()) {
      j["quantization"] = s.quantization;
      j["quantization"]["bits_per_weight"] = s.weight_bpw;
    }
    std::string text = j.dump(2) + "\n";
    write_file_atomic(json_path, text.data(), text.size());
  }
  return 0;
}

const Registrar reg({"inspect", "Show a checkpoint's architecture, tokenizer and tensors",
                     [](CLI::App& sub) -> std::function<int()> {
                       auto path = std::make_shared<std::string>();
                       auto json_path = std::make_shared<std::string>();
                       sub.add_option("path", *path, "a .gguf file or a Hugging Face folder")->required();
                       sub.add_option("--json", *json_path, "also write the results as JSON to FILE");
                       return [path, json_path] { return run(*path, *json_path); };
                     }});

}  // namespace cmd_inspect
}  // namespace qt
