#include "formats/vlm.h"

#include <filesystem>
#include <set>
#include <string_view>

#include "formats/error.h"
#include "formats/mapped_file.h"

namespace qt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct VlmRow {
  const char* hf_class;
  const char* model_type;
  const char* text_model_type;  // the text_config's model_type, as transformers writes it
  const char* text_row;         // our row (formats/arch.h) of the language model
};
constexpr VlmRow kVlms[] = {
    {"Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2"},
    {"Qwen3VLForConditionalGeneration", "qwen3_vl", "qwen3_vl_text", "qwen3"},
    {"Gemma3ForConditionalGeneration", "gemma3", "gemma3_text", "gemma3_text"},
};

const VlmRow* vlm_row(const json& cfg) {
  if (!cfg.is_object()) return nullptr;
  auto mit = cfg.find("model_type");
  if (mit != cfg.end() && !mit->is_string()) return nullptr;  // the config reader names the bad field
  const std::string mt = mit != cfg.end() ? mit->get<std::string>() : "";
  std::string cls;
  if (auto it = cfg.find("architectures"); it != cfg.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    cls = (*it)[0].get<std::string>();
  for (auto& r : kVlms)
    if (mt == r.model_type || (mt.empty() && cls == r.hf_class)) return &r;
  return nullptr;
}

// The text config classes' defaults for the fields ModelConfig reads, where they differ from the
// text rows' own (transformers 5.24 Gemma3TextConfig, Qwen2_5_VLTextConfig, Qwen3VLTextConfig):
// released Gemma 3 configs list only the fields that differ from these.
const json& text_defaults(const std::string& text_row) {
  static const json gemma3 = {{"vocab_size", 262208},
                              {"hidden_size", 2304},
                              {"intermediate_size", 9216},
                              {"num_hidden_layers", 26},
                              {"num_attention_heads", 8},
                              {"num_key_value_heads", 4},
                              {"head_dim", 256},
                              {"rms_norm_eps", 1e-6},
                              {"tie_word_embeddings", true},
                              {"query_pre_attn_scalar", 256},
                              {"sliding_window", 4096},
                              {"bos_token_id", 2},
                              {"eos_token_id", 1},
                              {"pad_token_id", 0}};
  static const json qwen = {{"vocab_size", 152064},    {"hidden_size", 8192},       {"intermediate_size", 29568},
                            {"num_hidden_layers", 80}, {"num_attention_heads", 64}, {"num_key_value_heads", 8},
                            {"rms_norm_eps", 1e-5},    {"rope_theta", 1e6},         {"bos_token_id", 151643},
                            {"eos_token_id", 151645}};
  static const json qwen3 = {{"vocab_size", 151936},
                             {"hidden_size", 4096},
                             {"intermediate_size", 22016},
                             {"num_hidden_layers", 32},
                             {"num_attention_heads", 32},
                             {"num_key_value_heads", 32},
                             {"head_dim", 128},
                             {"rms_norm_eps", 1e-6},
                             {"rope_theta", 5e5},
                             {"max_position_embeddings", 128000}};
  return text_row == "gemma3_text" ? gemma3 : text_row == "qwen3" ? qwen3 : qwen;
}

// M-RoPE on text. transformers' modeling_qwen2_5_vl.py Qwen2_5_VLRotaryEmbedding computes one
// cos/sin table per position component (temporal, height, width) from the same inv_freq and takes
// frequency band i from component i % 3 (recomposition_frequencies, over mrope_section);
// modeling_qwen3_vl.py Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope interleaves the
// components per frequency instead. get_rope_index gives a sequence without image or video tokens
// the same positions 0, 1, 2, ... in all three components (arange expanded to 3), so the three
// tables are equal and either recomposition is the 1-D RoPE table of those positions: the language
// model on text is its text row's block with ordinary RoPE (Qwen3-VL's deepstack adds visual
// features at image positions only). The M-RoPE keys are dropped here so that the RoPE reader
// sees the default type.
void reduce_mrope(json& rp, const std::string& path) {
  if (!rp.is_object()) return;
  for (const char* key : {"type", "rope_type"})
    if (rp.contains(key) && rp[key] == "mrope") rp[key] = "default";
  if (auto ms = rp.find("mrope_section"); ms != rp.end() && !ms->is_array())
    user_error("{}: mrope_section must be a list of three section sizes, got {}", path, ms->dump());
  rp.erase("mrope_section");
  rp.erase("mrope_interleaved");
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

}  // namespace

bool is_multimodal_config(const json& cfg) { return vlm_row(cfg) != nullptr; }

std::string mlx_vlm_module_name(const std::string& stored) {
  std::string n = starts_with(stored, "model.") ? stored.substr(6) : stored;
  if (starts_with(n, "visual.")) n = "vision_tower." + n.substr(7);
  return n;
}

std::string unsupported_multimodal(const json& cfg) {
  if (!cfg.is_object() || vlm_row(cfg) || !cfg.contains("vision_config")) return "";
  std::string cls = "?";
  if (auto it = cfg.find("architectures"); it != cfg.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    cls = (*it)[0].get<std::string>();
  auto mit = cfg.find("model_type");
  return "vision-language model '" + cls + "' (model_type '" +
         (mit != cfg.end() && mit->is_string() ? mit->get<std::string>() : "?") +
         "') is not supported (supported: Qwen2_5_VLForConditionalGeneration, Qwen3VLForConditionalGeneration, "
         "Gemma3ForConditionalGeneration)";
}

json multimodal_text_config(const json& cfg, const std::string& path) {
  const VlmRow* row = vlm_row(cfg);
  if (!row) user_error("{}: not a supported vision-language config", path);
  json t;
  if (auto tc = cfg.find("text_config"); tc != cfg.end() && tc->is_object()) {
    t = *tc;
  } else if (std::string(row->text_row) == "qwen2") {  // Qwen2.5-VL releases: text fields at the top
    t = cfg;
    t.erase("vision_config");
  } else {
    user_error("{}: {} has no text_config", path, row->hf_class);
  }
  const json mtj = t.value("model_type", json(row->text_model_type));
  const std::string mt = mtj.is_string() ? mtj.get<std::string>() : mtj.dump();
  if (mt != row->text_model_type && mt != row->model_type)
    user_error("{}: text_config.model_type is '{}', expected '{}'", path, mt, row->text_model_type);
  t["model_type"] = row->text_row;
  t.erase("architectures");
  // Fields a text_config leaves to its class's defaults; the head's tie may sit at the top only.
  for (auto& [k, v] : text_defaults(row->text_row).items())
    if (!t.contains(k) || t[k].is_null()) t[k] = v;
  if (cfg.contains("tie_word_embeddings") && !cfg["tie_word_embeddings"].is_null() &&
      (!cfg.contains("text_config") || !cfg["text_config"].contains("tie_word_embeddings")))
    t["tie_word_embeddings"] = cfg["tie_word_embeddings"];
  for (const char* key : {"rope_scaling", "rope_parameters"})
    if (t.contains(key)) reduce_mrope(t[key], path);
  return t;
}

std::string Multimodal::to_folder_name(const std::string& n) const {
  if (starts_with(n, "lm_head.")) return head_module + n.substr(7);
  if (starts_with(n, "model.")) return lm_prefix + n.substr(6);
  return n;
}

json Multimodal::ct_ignore(const json& decoder_modules) const {
  auto escape = [](const std::string& x) {
    std::string r;
    for (char ch : x) {
      if (std::string_view(".^$*+?()[]{}|\\").find(ch) != std::string_view::npos) r += '\\';
      r += ch;
    }
    return r;
  };
  json out = json::array();
  for (auto& m : decoder_modules) {
    std::string n = m.get<std::string>();
    if (starts_with(n, "model.")) n = n.substr(6);
    out.push_back("re:(.*\\.)?" + escape(n) + "$");
  }
  std::set<std::string> roots;
  for (auto& [name, t] : passthrough) {
    const std::string rest = starts_with(name, "model.") ? name.substr(6) : name;
    roots.insert(rest.substr(0, rest.find('.')));
  }
  for (auto& r : roots) out.push_back("re:(.*\\.)?" + escape(r) + "\\..*");
  return out;
}

Multimodal split_multimodal(const std::string& dir, const json& cfg, std::map<std::string, Tensor>& tensors) {
  Multimodal mm;
  mm.source_dir = dir;
  mm.config = cfg;
  // The language model's prefix: the one under which its embedding is stored.
  bool found = false;
  for (const char* p : {"model.language_model.", "language_model.model.", "model."})
    if (tensors.count(std::string(p) + "embed_tokens.weight")) {
      mm.lm_prefix = p;
      found = true;
      break;
    }
  if (!found) user_error("{}: no language model embedding (model.embed_tokens.weight or its VLM names)", dir);
  if (!tensors.count("lm_head.weight") && tensors.count("language_model.lm_head.weight"))
    mm.head_module = "language_model.lm_head";
  std::map<std::string, Tensor> lm;
  for (auto& [name, t] : tensors) {
    if (starts_with(name, mm.head_module + ".")) {
      lm.emplace("lm_head" + name.substr(mm.head_module.size()), t);
      continue;
    }
    if (starts_with(name, mm.lm_prefix)) {
      const std::string rest = name.substr(mm.lm_prefix.size());
      // Under "model." (Qwen2.5-VL's own names) sit the decoder's layers, embedding (quantized: its
      // scales and biases too) and norm only.
      if (starts_with(rest, "layers.") || starts_with(rest, "embed_tokens.") || starts_with(rest, "norm.") ||
          starts_with(rest, "rotary_emb.")) {
        lm.emplace("model." + rest, t);
        continue;
      }
    }
    mm.passthrough.emplace(name, t);
  }
  tensors = std::move(lm);
  return mm;
}

json multimodal_config_json(const Multimodal& mm, const std::string& dtype, const json& extra) {
  json cfg = mm.config;
  // transformers 5 writes "dtype", 4.x "torch_dtype": the keys the file has follow the output.
  auto set_dtype = [&](json& j) {
    bool any = false;
    for (const char* key : {"dtype", "torch_dtype"})
      if (j.contains(key)) j[key] = dtype, any = true;
    return any;
  };
  if (!set_dtype(cfg)) cfg["torch_dtype"] = dtype;
  if (cfg.contains("text_config") && cfg["text_config"].is_object()) set_dtype(cfg["text_config"]);
  if (extra.is_object()) cfg.update(extra);
  return cfg;
}

void copy_multimodal_side_files(const Multimodal& mm, const std::string& dir) {
  for (auto& e : fs::directory_iterator(mm.source_dir)) {
    if (!e.is_regular_file()) continue;
    const std::string n = e.path().filename().string();
    if (n == "config.json" || n == "model.safetensors.index.json" || e.path().extension() == ".safetensors" ||
        n[0] == '.')
      continue;
    const std::string to = (fs::path(dir) / n).string();
    if (e.file_size() == 0) {
      write_file_atomic(to, "", 0);
      continue;
    }
    MappedFile mf = map_file(e.path().string());
    write_file_atomic(to, mf.data, mf.size);
  }
}

}  // namespace qt
