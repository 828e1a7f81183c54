// ModelConfig from HF config.json (transformers v4 and v5 forms) and from GGUF metadata.
// Facts: docs/spec/gguf.md §Model keys, §Tied embeddings, §rope_freqs; docs/spec/hf-config.md.
#include "formats/model_config.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "formats/error.h"
#include "formats/gguf.h"

namespace qt {

namespace {

using nlohmann::json;

// A float as JSON: the shortest decimal that round-trips the float, so 1e-5f is written 1e-05,
// not 9.999999747378752e-06.
double clean_float(float f) { return std::stod(fmt::format("{}", f)); }

// Typed field access: a present field of the wrong JSON type is bad input naming the key.
int64_t int_field(const json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) user_error("{}: missing '{}'", path, key);
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) {  // 576.0 is still 576; 576.5 is not a size
    double d = it->get<double>();
    if (std::floor(d) == d && std::fabs(d) < 1e15) return int64_t(d);
  }
  user_error("{}: '{}' must be an integer, got {}", path, key, it->dump());
}
int64_t int_field_or(const json& j, const char* key, int64_t def, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  return int_field(j, key, path);
}
double num_field_or(const json& j, const char* key, double def, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number()) user_error("{}: '{}' must be a number, got {}", path, key, it->dump());
  return it->get<double>();
}
bool bool_field_or(const json& j, const char* key, bool def, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) user_error("{}: '{}' must be true or false, got {}", path, key, it->dump());
  return it->get<bool>();
}
std::string str_field_or(const json& j, const char* key, const std::string& def, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_string()) user_error("{}: '{}' must be a string, got {}", path, key, it->dump());
  return it->get<std::string>();
}
// bos/eos ids: an int, a list of ints (first one is the id a single-id consumer uses) or null.
int token_id_field(const json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return -1;
  const json* v = &*it;
  if (v->is_array()) {
    if (v->empty()) return -1;
    v = &(*v)[0];
  }
  if (!v->is_number_integer()) user_error("{}: '{}' must be a token id, got {}", path, key, it->dump());
  return v->get<int>();
}

// rope_scaling (v4) or rope_parameters (v5): {"rope_type"|"type": ..., "factor": ..., ...}.
RopeScaling parse_rope_scaling(const json& rs, const json& top, const std::string& path, bool yarn = false) {
  RopeScaling r;
  if (rs.is_null()) return r;
  if (!rs.is_object()) user_error("{}: 'rope_scaling' must be an object or null", path);
  std::string type = str_field_or(rs, "rope_type", "", path);
  if (type.empty()) type = str_field_or(rs, "type", "", path);
  if (type.empty() || type == "default") return r;
  if (type == "linear") {
    r.type = "linear";
    r.factor = float(num_field_or(rs, "factor", 1.0, path));
  } else if (type == "llama3") {
    r.type = "llama3";
    r.factor = float(num_field_or(rs, "factor", 8.0, path));
    r.low_freq_factor = float(num_field_or(rs, "low_freq_factor", 1.0, path));
    r.high_freq_factor = float(num_field_or(rs, "high_freq_factor", 4.0, path));
    // v5 fills original_max_position_embeddings from max_position_embeddings when missing.
    r.original_max_position_embeddings = int(int_field_or(
        rs, "original_max_position_embeddings", int_field_or(top, "max_position_embeddings", 8192, path), path));
    if (r.high_freq_factor <= r.low_freq_factor)
      user_error("{}: rope_scaling high_freq_factor {} must exceed low_freq_factor {}", path, r.high_freq_factor,
                 r.low_freq_factor);
  } else if (type == "yarn" && yarn) {
    r.type = "yarn";
    r.factor = float(num_field_or(rs, "factor", 32.0, path));
    r.beta_fast = float(num_field_or(rs, "beta_fast", 32.0, path));
    r.beta_slow = float(num_field_or(rs, "beta_slow", 1.0, path));
    r.truncate = bool_field_or(rs, "truncate", true, path);
    r.attention_factor = float(num_field_or(rs, "attention_factor", 0.0, path));
    r.original_max_position_embeddings = int(int_field_or(
        rs, "original_max_position_embeddings", int_field_or(top, "max_position_embeddings", 8192, path), path));
    if (rs.contains("mscale") || rs.contains("mscale_all_dim"))
      user_error("{}: rope_scaling mscale / mscale_all_dim are not supported", path);
  } else {
    user_error("{}: unsupported rope scaling type '{}' (supported: llama3, linear)", path, type);
  }
  if (!(r.factor > 0)) user_error("{}: rope_scaling factor must be positive, got {}", path, r.factor);
  return r;
}

void validate(const ModelConfig& c, const std::string& path) {
  auto positive = [&](const char* what, int64_t v) {
    if (v <= 0 || v > (int64_t(1) << 31)) user_error("{}: {} must be positive, got {}", path, what, v);
  };
  positive("hidden size", c.hidden);
  positive("intermediate size", c.intermediate);
  positive("number of layers", c.n_layers);
  positive("number of attention heads", c.n_heads);
  positive("number of key/value heads", c.n_kv_heads);
  positive("head_dim", c.head_dim);
  positive("vocabulary size", c.vocab);
  if (c.n_heads % c.n_kv_heads != 0)
    user_error("{}: {} attention heads are not a multiple of {} key/value heads", path, c.n_heads, c.n_kv_heads);
  if (c.head_dim % 2 != 0) user_error("{}: head_dim {} must be even for RoPE", path, c.head_dim);
  if (!(c.rope_theta > 0)) user_error("{}: rope_theta must be positive, got {}", path, c.rope_theta);
  if (!(c.rms_eps > 0)) user_error("{}: rms_norm_eps must be positive, got {}", path, c.rms_eps);
}

// The Gemma block's parameters, with Gemma2Config's / Gemma3TextConfig's defaults.
void read_gemma_fields(const json& j, const std::string& path, ModelConfig* c) {
  const bool g2 = c->arch == "gemma2";
  c->query_pre_attn_scalar = float(num_field_or(j, "query_pre_attn_scalar", 256.0, path));
  c->attn_softcap = float(num_field_or(j, "attn_logit_softcapping", g2 ? 50.0 : 0.0, path));
  c->final_softcap = float(num_field_or(j, "final_logit_softcapping", g2 ? 30.0 : 0.0, path));
  c->sliding_window = int(int_field_or(j, "sliding_window", 4096, path));
  if (!(c->query_pre_attn_scalar > 0))
    user_error("{}: query_pre_attn_scalar must be positive, got {}", path, c->query_pre_attn_scalar);
  if (c->attn_softcap < 0 || c->final_softcap < 0) user_error("{}: soft-capping values must be positive", path);
  if (c->sliding_window <= 0) user_error("{}: sliding_window must be positive, got {}", path, c->sliding_window);
  if (bool_field_or(j, "use_bidirectional_attention", false, path))
    user_error("{}: use_bidirectional_attention (an embedding model) is not supported", path);
  if (!g2 && c->rope_local_theta == 0)
    c->rope_local_theta = float(num_field_or(j, "rope_local_base_freq", 10000.0, path));
  if (!(g2 || c->rope_local_theta > 0))
    user_error("{}: rope_local_base_freq must be positive, got {}", path, c->rope_local_theta);
  // Which layers slide: layer_types when given, else gemma2 every other layer from the first,
  // gemma3 all but every sliding_window_pattern-th.
  c->sliding.assign(size_t(c->n_layers), 0);
  auto lt = j.find("layer_types");
  if (lt != j.end() && !lt->is_null()) {
    if (!lt->is_array() || int(lt->size()) != c->n_layers)
      user_error("{}: 'layer_types' must list the {} layers", path, c->n_layers);
    for (int i = 0; i < c->n_layers; ++i) {
      const json& t = (*lt)[size_t(i)];
      if (t == "sliding_attention")
        c->sliding[size_t(i)] = 1;
      else if (t != "full_attention")
        user_error("{}: layer_types[{}] is {}, expected \"sliding_attention\" or \"full_attention\"", path, i,
                   t.dump());
    }
  } else {
    int64_t pattern =
        g2 ? 2 : int_field_or(j, "sliding_window_pattern", int_field_or(j, "_sliding_window_pattern", 6, path), path);
    if (pattern <= 0) user_error("{}: sliding_window_pattern must be positive, got {}", path, pattern);
    for (int i = 0; i < c->n_layers; ++i) c->sliding[size_t(i)] = (i + 1) % pattern != 0;
  }
}

// SmolLM3Config: no_rope_layers[i] is 1 where layer i applies RoPE, 0 where it does not; when
// absent, every no_rope_layer_interval-th layer (the 4th, 8th, ...) goes without.
void read_no_rope_layers(const json& j, const std::string& path, ModelConfig* c) {
  std::vector<uint8_t> none(size_t(c->n_layers), 0);
  auto it = j.find("no_rope_layers");
  if (it != j.end() && !it->is_null()) {
    if (!it->is_array() || int(it->size()) != c->n_layers)
      user_error("{}: 'no_rope_layers' must list the {} layers", path, c->n_layers);
    for (int i = 0; i < c->n_layers; ++i) {
      const json& v = (*it)[size_t(i)];
      if (v != 0 && v != 1) user_error("{}: no_rope_layers[{}] is {}, expected 0 or 1", path, i, v.dump());
      none[size_t(i)] = v == 0;
    }
  } else {
    const int64_t every = int_field_or(j, "no_rope_layer_interval", 4, path);
    if (every <= 0) user_error("{}: no_rope_layer_interval must be positive, got {}", path, every);
    for (int i = 0; i < c->n_layers; ++i) none[size_t(i)] = (i + 1) % every == 0;
  }
  if (bool_field_or(j, "use_sliding_window", false, path))
    user_error("{}: use_sliding_window is not supported for {}", path, c->arch);
  if (std::find(none.begin(), none.end(), uint8_t(1)) != none.end()) c->no_rope = std::move(none);
}

// GptOssConfig (configuration_gpt_oss.py): every layer sparse with intermediate_size rows per
// expert, the clamped SwiGLU's alpha and limit, layer_types alternating sliding (first) and full
// attention, YaRN RoPE (factor 32 from 4096 positions when the config names none).
void read_gpt_oss_fields(const json& j, const std::string& path, ModelConfig* c) {
  c->n_experts = int(int_field_or(j, "num_local_experts", int_field_or(j, "num_experts", 128, path), path));
  c->n_experts_per_tok = int(int_field_or(j, "num_experts_per_tok", 4, path));
  c->moe_intermediate = c->intermediate;
  c->swiglu_alpha = float(num_field_or(j, "swiglu_alpha", 1.702, path));
  c->swiglu_limit = float(num_field_or(j, "swiglu_limit", 7.0, path));
  if (c->n_experts <= 0 || c->n_experts_per_tok <= 0 || c->n_experts_per_tok > c->n_experts)
    user_error("{}: num_experts_per_tok {} must be within 1..num_local_experts ({})", path, c->n_experts_per_tok,
               c->n_experts);
  if (!(c->swiglu_limit > 0)) user_error("{}: swiglu_limit must be positive, got {}", path, c->swiglu_limit);
  c->sliding_window = int(int_field_or(j, "sliding_window", 128, path));
  if (c->sliding_window <= 0) user_error("{}: sliding_window must be positive, got {}", path, c->sliding_window);
  c->sliding.assign(size_t(c->n_layers), 0);
  auto lt = j.find("layer_types");
  for (int i = 0; i < c->n_layers; ++i) {
    if (lt == j.end() || lt->is_null()) {
      c->sliding[size_t(i)] = i % 2 == 0;
      continue;
    }
    if (!lt->is_array() || int(lt->size()) != c->n_layers)
      user_error("{}: 'layer_types' must list the {} layers", path, c->n_layers);
    const json& t = (*lt)[size_t(i)];
    if (t != "sliding_attention" && t != "full_attention")
      user_error("{}: layer_types[{}] is {}, expected \"sliding_attention\" or \"full_attention\"", path, i, t.dump());
    c->sliding[size_t(i)] = t == "sliding_attention";
  }
  if (!j.contains("rope_scaling") && !j.contains("rope_parameters")) {
    c->rope_scaling.type = "yarn";
    c->rope_scaling.factor = 32.0f;
    c->rope_scaling.truncate = false;
    c->rope_scaling.original_max_position_embeddings = 4096;
  }
}

// The sparse FFN's parameters (Qwen3MoeConfig, MixtralConfig). Both classes map num_experts to
// num_local_experts; transformers 5 writes the latter, older qwen3_moe files the former.
void read_moe_fields(const json& j, const std::string& path, ModelConfig* c) {
  if (c->desc().moe->gpt_oss) return read_gpt_oss_fields(j, path, c);
  const bool mixtral = c->arch == "mixtral";
  const int64_t def_experts = mixtral ? 8 : 128;
  c->n_experts = int(int_field_or(j, "num_local_experts", int_field_or(j, "num_experts", def_experts, path), path));
  c->n_experts_per_tok = int(int_field_or(j, "num_experts_per_tok", mixtral ? 2 : 8, path));
  c->moe_intermediate = mixtral ? c->intermediate : int(int_field_or(j, "moe_intermediate_size", 768, path));
  c->norm_topk_prob = mixtral || bool_field_or(j, "norm_topk_prob", false, path);
  if (c->n_experts < 0) user_error("{}: num_experts must not be negative, got {}", path, c->n_experts);
  if (c->n_experts > 0 && (c->n_experts_per_tok <= 0 || c->n_experts_per_tok > c->n_experts))
    user_error("{}: num_experts_per_tok {} must be within 1..num_experts ({})", path, c->n_experts_per_tok,
               c->n_experts);
  if (c->n_experts > 0 && c->moe_intermediate <= 0)
    user_error("{}: moe_intermediate_size must be positive, got {}", path, c->moe_intermediate);
  if (mixtral) {
    if (c->n_experts == 0) user_error("{}: num_local_experts must be positive for mixtral", path);
    // MixtralConfig: a sliding_window (null in the released models) masks every layer.
    c->sliding_window = int(int_field_or(j, "sliding_window", 0, path));
    if (c->sliding_window < 0) user_error("{}: sliding_window must be positive, got {}", path, c->sliding_window);
    if (c->sliding_window > 0) c->sliding.assign(size_t(c->n_layers), 1);
    return;
  }
  if (bool_field_or(j, "use_sliding_window", false, path))
    user_error("{}: use_sliding_window is not supported for {}", path, c->arch);
  // Qwen3MoeDecoderLayer: layer i is sparse unless listed in mlp_only_layers, and only when
  // (i + 1) is a multiple of decoder_sparse_step.
  const int64_t step = int_field_or(j, "decoder_sparse_step", 1, path);
  if (step <= 0) user_error("{}: decoder_sparse_step must be positive, got {}", path, step);
  std::vector<uint8_t> dense(size_t(c->n_layers), 0);
  for (int i = 0; i < c->n_layers; ++i) dense[size_t(i)] = c->n_experts == 0 || (i + 1) % step != 0;
  auto it = j.find("mlp_only_layers");
  if (it != j.end() && !it->is_null()) {
    if (!it->is_array()) user_error("{}: 'mlp_only_layers' must be a list of layer indices", path);
    for (const json& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c->n_layers)
        user_error("{}: mlp_only_layers holds {}, not a layer of 0..{}", path, v.dump(), c->n_layers - 1);
      dense[size_t(v.get<int64_t>())] = 1;
    }
  }
  if (std::find(dense.begin(), dense.end(), uint8_t(1)) != dense.end()) c->dense_mlp = std::move(dense);
}

}  // namespace

float ModelConfig::attn_scale() const {
  return query_pre_attn_scalar > 0 ? float(1.0 / std::sqrt(double(query_pre_attn_scalar)))
                                   : 1.0f / std::sqrt(float(head_dim));
}

ModelConfig ModelConfig::from_hf_json(const json& j, const std::string& path) {
  if (!j.is_object()) user_error("{}: config must be a JSON object", path);
  const ArchDesc* row = nullptr;
  std::string model_type = str_field_or(j, "model_type", "", path);
  if (model_type == "gemma3")  // Gemma3ForConditionalGeneration: the folder loader reads text_config
    user_error(
        "{}: 'gemma3' is the multimodal Gemma3ForConditionalGeneration: its language model is the "
        "text_config (model_type 'gemma3_text'), read when the folder is loaded (formats/vlm.h)",
        path);
  if (!model_type.empty()) {
    row = arch_by_model_type(model_type);
    if (!row) user_error("{}: unsupported architecture '{}' (supported: {})", path, model_type, supported_archs());
  } else {
    auto it = j.find("architectures");
    if (it == j.end() || !it->is_array() || it->empty() || !(*it)[0].is_string())
      user_error("{}: no 'model_type' or 'architectures' to tell the architecture", path);
    std::string cls = (*it)[0].get<std::string>();
    row = arch_by_hf_class(cls);
    if (!row) user_error("{}: unsupported architecture '{}' (supported: {})", path, cls, supported_archs());
  }

  ModelConfig c;
  c.arch = row->model_type;
  c.hidden = int(int_field(j, "hidden_size", path));
  c.intermediate = int(int_field(j, "intermediate_size", path));
  c.n_layers = int(int_field(j, "num_hidden_layers", path));
  c.n_heads = int(int_field(j, "num_attention_heads", path));
  c.vocab = int(int_field(j, "vocab_size", path));
  c.n_kv_heads = int(int_field_or(j, "num_key_value_heads", c.n_heads, path));
  if (c.n_heads <= 0) user_error("{}: num_attention_heads must be positive, got {}", path, c.n_heads);
  // Qwen3Config defaults head_dim to 128, Gemma's configs to 256; the others derive it.
  const int head_dim_default = row->default_head_dim > 0 ? row->default_head_dim : c.hidden / c.n_heads;
  c.head_dim = int(int_field_or(j, "head_dim", head_dim_default, path));
  c.max_position = int(int_field_or(j, "max_position_embeddings", row->default_max_position, path));
  c.rms_eps = float(num_field_or(j, "rms_norm_eps", 1e-6, path));
  c.tie_word_embeddings = bool_field_or(j, "tie_word_embeddings", row->default_tied, path);
  c.bos_token_id = token_id_field(j, "bos_token_id", path);
  c.eos_token_id = token_id_field(j, "eos_token_id", path);
  c.pad_token_id = token_id_field(j, "pad_token_id", path);
  c.torch_dtype = str_field_or(j, "torch_dtype", str_field_or(j, "dtype", "float32", path), path);

  if (row->act == Activation::GeluTanh) {
    // Gemma's MLP reads hidden_activation (hidden_act is a leftover of Gemma 1's config).
    std::string act =
        str_field_or(j, "hidden_activation", str_field_or(j, "hidden_act", "gelu_pytorch_tanh", path), path);
    if (act != "gelu_pytorch_tanh")
      user_error("{}: unsupported hidden_activation '{}' for {} (only gelu_pytorch_tanh)", path, act, c.arch);
  } else {
    std::string act = str_field_or(j, "hidden_act", "silu", path);
    if (act != "silu") user_error("{}: unsupported hidden_act '{}' (only silu)", path, act);
  }
  if (bool_field_or(j, "mlp_bias", false, path)) user_error("{}: mlp_bias is not supported", path);
  // Llama and Qwen3's attention_bias also puts a bias on o_proj, which the engine does not have.
  if (row->qkv_bias) {
    c.attention_bias = true;
  } else if (bool_field_or(j, "attention_bias", false, path)) {
    user_error("{}: attention_bias (q/k/v/o biases) is not supported for {}", path, c.arch);
  }

  // RoPE: v4 keeps rope_theta / rope_scaling at the top; v5 nests both in rope_parameters, and
  // for Gemma 3 per layer type ({"full_attention": {...}, "sliding_attention": {...}}).
  auto rp = j.find("rope_parameters");
  const double theta_default = row->default_rope_theta;
  if (rp != j.end() && rp->is_object() && rp->contains("full_attention")) {
    const json& full = (*rp)["full_attention"];
    if (!full.is_object()) user_error("{}: rope_parameters.full_attention must be an object", path);
    c.rope_theta = float(num_field_or(full, "rope_theta", theta_default, path));
    c.rope_scaling = parse_rope_scaling(full, j, path);
    auto sl = rp->find("sliding_attention");
    if (sl != rp->end() && sl->is_object()) {
      c.rope_local_theta = float(num_field_or(*sl, "rope_theta", 10000.0, path));
      if (!parse_rope_scaling(*sl, j, path).type.empty())
        user_error("{}: RoPE scaling on sliding-window layers is not supported", path);
    }
  } else if (rp != j.end() && rp->is_object()) {
    c.rope_theta = float(num_field_or(*rp, "rope_theta", num_field_or(j, "rope_theta", theta_default, path), path));
    c.rope_scaling = parse_rope_scaling(*rp, j, path, row->attn_sinks);
  } else {
    c.rope_theta = float(num_field_or(j, "rope_theta", theta_default, path));
    auto rs = j.find("rope_scaling");
    if (rs != j.end()) c.rope_scaling = parse_rope_scaling(*rs, j, path, row->attn_sinks);
  }
  const double partial = rp != j.end() && rp->is_object() && rp->contains("partial_rotary_factor")
                             ? num_field_or(*rp, "partial_rotary_factor", 1.0, path)
                             : num_field_or(j, "partial_rotary_factor", 1.0, path);
  if (partial != 1.0) user_error("{}: partial_rotary_factor {} is not supported (only 1.0)", path, partial);
  if (row->gemma_attention) read_gemma_fields(j, path, &c);
  if (row->no_rope_layers) read_no_rope_layers(j, path, &c);
  if (row->moe) read_moe_fields(j, path, &c);
  if (row->fused_proj) {
    // Phi3Config: a sliding_window (Phi-3-mini-4k: 2047) masks every layer; null: none.
    c.sliding_window = int(int_field_or(j, "sliding_window", 0, path));
    if (c.sliding_window < 0) user_error("{}: sliding_window must be positive, got {}", path, c.sliding_window);
    if (c.sliding_window > 0) c.sliding.assign(size_t(c.n_layers), 1);
  }
  validate(c, path);
  return c;
}

namespace {

// The Gemma 2 / 3 block's parameters as llama.cpp reads them (src/models/gemma2.cpp, gemma3.cpp
// load_arch_hparams; defaults from llama-hparams.h where a key is optional). The queries are scaled
// by 1/sqrt(head_dim), or 1/sqrt(hidden/heads) for the 27B (46 / 62 layers): GGUF has no key for
// query_pre_attn_scalar. Sliding layers: attention.sliding_window_pattern (a per-layer bool array,
// or a period) when present, else every 2nd (gemma2) / all but every 6th (gemma3) layer; gemma3
// without a sliding_window key has no sliding layers.
// Which layers slide, as llama.cpp's load_swa_pattern (src/llama-model.cpp): the per-layer array
// attention.sliding_window_pattern, else that key as a period (default `period`), layer i sliding
// when i % period < period - 1 (llama_hparams::set_swa_pattern).
void read_swa_pattern(const GgufFile& g, const std::string& arch, int64_t period, ModelConfig* c) {
  const std::string pk = arch + ".attention.sliding_window_pattern";
  c->sliding.assign(size_t(c->n_layers), 0);
  if (g.has(pk) && g.metadata().at(pk).type == GgufValueType::ARRAY) {
    const std::vector<int64_t>& v = g.get_int_array(pk);
    if (int(v.size()) != c->n_layers)
      user_error("{}: {} lists {} layers, the model has {}", g.path(), pk, v.size(), c->n_layers);
    for (int i = 0; i < c->n_layers; ++i) c->sliding[size_t(i)] = v[size_t(i)] != 0;
    return;
  }
  period = g.get_int_or(pk, period);
  if (period < 0) user_error("{}: {} must not be negative, got {}", g.path(), pk, period);
  for (int i = 0; i < c->n_layers; ++i) c->sliding[size_t(i)] = period == 0 || i % period < period - 1;
}

void read_gemma_gguf(const GgufFile& g, const std::string& arch, ModelConfig* c) {
  auto key = [&](const char* k) { return arch + "." + k; };
  const bool g2 = arch == "gemma2";
  const bool big = c->n_layers == (g2 ? 46 : 62);
  c->query_pre_attn_scalar = big ? float(c->hidden / c->n_heads) : float(c->head_dim);
  c->attn_softcap = g2 ? float(g.get_float_or(key("attn_logit_softcapping"), 50.0)) : 0.0f;
  c->final_softcap = float(g.get_float_or(key("final_logit_softcapping"), g2 ? 30.0 : 0.0));
  if (!g2) c->rope_local_theta = float(g.get_float_or(key("rope.freq_base_swa"), 10000.0));
  const int64_t window = g.get_int_or(key("attention.sliding_window"), g2 ? 4096 : 0);
  c->sliding.assign(size_t(c->n_layers), 0);
  if (window <= 0) {
    c->sliding_window = c->max_position;  // no layer slides; the value is not used
    return;
  }
  c->sliding_window = int(window);
  read_swa_pattern(g, arch, g2 ? 2 : 6, c);
}

// Phi-3 (convert_hf_to_gguf.py Phi3MiniModel): a sliding window on every layer when the key is
// there, RoPE over the whole head (rope.dimension_count = head_dim; partial rotary is not read).
// llama.cpp itself runs Phi-3 without the window (src/models/phi3.cpp), which equals the model
// only while the context fits in it.
void read_phi3_gguf(const GgufFile& g, const std::string& arch, ModelConfig* c) {
  const int64_t window = g.get_int_or(arch + ".attention.sliding_window", 0);
  if (window > 0) c->sliding_window = int(window), c->sliding.assign(size_t(c->n_layers), 1);
  const int64_t rot = g.get_int_or(arch + ".rope.dimension_count", c->head_dim);
  if (rot != c->head_dim)
    user_error("{}: {}.rope.dimension_count {} is not the head size {} (partial RoPE is not supported)", g.path(), arch,
               rot, c->head_dim);
  if (g.has(arch + ".rope.scaling.attn_factor") || g.find_tensor("rope_factors_long.weight"))
    user_error("{}: LongRoPE scaling (rope_factors_long / short) is not supported", g.path());
}

// A mixture of experts (convert_hf_to_gguf.py TextModel.set_gguf_parameters, Qwen2MoeModel): every
// layer sparse, expert_used_count experts per token, renormalised top-k weights (llama.cpp's
// qwen3moe and llama graphs always renormalise: build_moe_ffn(..., norm_w = true) in
// src/models/qwen3moe.cpp, llama.cpp). An expert's rows: expert_feed_forward_length, else
// llama.cpp's default n_ff / n_expert_used (qwen3moe) or feed_forward_length (Mixtral's "llama").
void read_moe_gguf(const GgufFile& g, const std::string& arch, ModelConfig* c) {
  auto key = [&](const char* k) { return arch + "." + k; };
  c->n_experts = int(g.get_int(key("expert_count")));
  c->n_experts_per_tok = int(g.get_int(key("expert_used_count")));
  if (c->n_experts_per_tok <= 0 || c->n_experts_per_tok > c->n_experts)
    user_error("{}: {} {} must be within 1..{} ({})", g.path(), key("expert_used_count"), c->n_experts_per_tok,
               key("expert_count"), c->n_experts);
  const int64_t def = c->arch == "mixtral" ? c->intermediate : c->intermediate / c->n_experts_per_tok;
  c->moe_intermediate = int(g.get_int_or(key("expert_feed_forward_length"), def));
  if (c->arch == "mixtral") c->intermediate = c->moe_intermediate;
  if (c->moe_intermediate <= 0) user_error("{}: the experts' feed-forward length must be positive", g.path());
  c->norm_topk_prob = true;
  if (g.has(key("expert_gating_func")) &&
      g.get_int(key("expert_gating_func")) != 1)  // LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX
    user_error("{}: {} {} is not softmax", g.path(), key("expert_gating_func"), g.get_int(key("expert_gating_func")));
  if (g.has(key("expert_shared_count")) && g.get_int(key("expert_shared_count")) > 0)
    user_error("{}: shared experts are not supported", g.path());
}

// gpt-oss as llama.cpp runs it (src/models/openai-moe.cpp, conversion/gpt_oss.py): every layer
// sparse with expert_feed_forward_length rows per expert, the top-k router logits softmaxed
// (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT), sliding layers by load_swa_pattern with period 2
// (the even layers), the clamped SwiGLU with llama-graph.cpp's hard-coded alpha 1.702 and limit 7
// (LLM_FFN_SWIGLU_OAI_MOE), and YaRN whose ramp ends are always floored / ceiled
// (ggml.c ggml_rope_yarn_corr_dims: transformers' truncate = true).
void read_gpt_oss_gguf(const GgufFile& g, const std::string& arch, ModelConfig* c) {
  auto key = [&](const char* k) { return arch + "." + k; };
  g.get_int(key("expert_feed_forward_length"));  // required: no default for gpt-oss
  read_moe_gguf(g, arch, c);
  c->norm_topk_prob = false;  // the router's own rule (formats/arch.h MoeNames::gpt_oss)
  c->swiglu_alpha = 1.702f;
  c->swiglu_limit = 7.0f;
  c->sliding_window = int(g.get_int(key("attention.sliding_window")));
  if (c->sliding_window <= 0) user_error("{}: {} must be positive", g.path(), key("attention.sliding_window"));
  read_swa_pattern(g, arch, 2, c);
  if (g.has(key("rope.freq_base_swa")) &&
      g.get_float(key("rope.freq_base_swa")) != g.get_float_or(key("rope.freq_base"), 10000.0))
    user_error("{}: {} differs from rope.freq_base (one RoPE base for every layer is supported)", g.path(),
               key("rope.freq_base_swa"));
  for (const char* k : {"expert_weights_scale", "rope.scaling.attn_factor", "rope.scaling.yarn_attn_factor",
                        "rope.scaling.yarn_ext_factor", "rope.scaling.yarn_log_multiplier"})
    if (g.has(key(k))) user_error("{}: {} is not supported for gpt-oss", g.path(), key(k));
  const std::string scaling = g.get_string_or(key("rope.scaling.type"), "");
  if (scaling.empty() || scaling == "none") return;
  if (scaling != "yarn") user_error("{}: gpt-oss with rope scaling '{}' (supported: yarn)", g.path(), scaling);
  RopeScaling& r = c->rope_scaling;
  r.type = "yarn";
  r.factor = float(g.get_float(key("rope.scaling.factor")));
  r.original_max_position_embeddings = int(g.get_int(key("rope.scaling.original_context_length")));
  r.beta_fast = float(g.get_float_or(key("rope.scaling.yarn_beta_fast"), 32.0));
  r.beta_slow = float(g.get_float_or(key("rope.scaling.yarn_beta_slow"), 1.0));
  r.truncate = true;
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& g) {
  const std::string& path = g.path();
  std::string arch = g.get_string("general.architecture");
  auto key = [&](const char* k) { return arch + "." + k; };
  const int64_t n_experts = g.get_int_or(key("expert_count"), 0);
  const ArchDesc* row = arch_by_gguf(arch, n_experts > 0);
  if (!row)
    user_error(
        "{}: unsupported GGUF architecture '{}'{} (read from GGUF: llama, qwen2, qwen3, gemma2, gemma3, phi3; "
        "mixture-of-experts: qwen3moe, gpt-oss, and llama with expert_count as Mixtral's)",
        path, arch, n_experts > 0 ? " with " + std::to_string(n_experts) + " experts" : std::string());

  ModelConfig c;
  c.arch = row->model_type;
  c.hidden = int(g.get_int(key("embedding_length")));
  c.intermediate = int(g.get_int(key("feed_forward_length")));
  c.n_layers = int(g.get_int(key("block_count")));
  c.n_heads = int(g.get_int(key("attention.head_count")));
  c.n_kv_heads = int(g.get_int_or(key("attention.head_count_kv"), c.n_heads));
  if (c.n_heads <= 0) user_error("{}: {} must be positive", path, key("attention.head_count"));
  // key_length is written only when config.json had head_dim; rope.dimension_count otherwise.
  c.head_dim =
      int(g.get_int_or(key("attention.key_length"), g.get_int_or(key("rope.dimension_count"), c.hidden / c.n_heads)));
  c.max_position = int(g.get_int_or(key("context_length"), row->default_max_position));
  c.rope_theta = float(g.get_float_or(key("rope.freq_base"), 10000.0));
  c.rms_eps = float(g.get_float(key("attention.layer_norm_rms_epsilon")));
  if (g.has(key("vocab_size"))) {
    c.vocab = int(g.get_int(key("vocab_size")));
  } else if (g.has("tokenizer.ggml.tokens")) {
    c.vocab = int(g.get_string_array("tokenizer.ggml.tokens").size());
  } else if (auto* t = g.find_tensor("token_embd.weight"); t && t->ne.size() == 2) {
    c.vocab = int(t->ne[1]);
  }
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;  // tied: docs/spec/gguf.md
  c.bos_token_id = int(g.get_int_or("tokenizer.ggml.bos_token_id", -1));
  c.eos_token_id = int(g.get_int_or("tokenizer.ggml.eos_token_id", -1));
  c.pad_token_id = int(g.get_int_or("tokenizer.ggml.padding_token_id", -1));
  c.torch_dtype = "float32";  // tensors are dequantized to f32 at load
  c.attention_bias = row->qkv_bias;
  if (!row->qkv_bias) {
    for (auto& t : g.tensors()) {
      if (t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0)
        user_error("{}: tensor {}: biases are not supported for {}", path, t.name, arch);
    }
  }

  const bool gpt_oss = row->moe && row->moe->gpt_oss;
  if (row->moe) gpt_oss ? read_gpt_oss_gguf(g, arch, &c) : read_moe_gguf(g, arch, &c);
  if (row->gemma_attention) read_gemma_gguf(g, arch, &c);
  if (row->fused_proj) read_phi3_gguf(g, arch, &c);

  std::string scaling = gpt_oss ? "" : g.get_string_or(key("rope.scaling.type"), "");
  if (scaling == "linear") {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = float(g.get_float(key("rope.scaling.factor")));
  } else if (!scaling.empty() && scaling != "none") {
    user_error("{}: unsupported rope scaling type '{}' (supported: llama3, linear)", path, scaling);
  }
  if (auto* rf = g.find_tensor("rope_freqs.weight")) {
    if (!c.rope_scaling.type.empty()) user_error("{}: both {} and rope_freqs.weight", path, key("rope.scaling.type"));
    validate(c, path);
    c.rope_scaling = llama3_scaling_from_rope_freqs(g.dequantize(*rf), c.rope_theta, c.head_dim, path);
  }
  validate(c, path);
  return c;
}

nlohmann::json ModelConfig::to_hf_json() const {
  const ArchDesc* row = arch_by_model_type(arch);
  if (!row) user_error("config: unsupported architecture '{}' (supported: {})", arch, supported_archs());
  json j;
  j["architectures"] = {row->hf_class};
  j["model_type"] = arch;
  j["hidden_size"] = hidden;
  j["intermediate_size"] = intermediate;
  j["num_hidden_layers"] = n_layers;
  j["num_attention_heads"] = n_heads;
  j["num_key_value_heads"] = n_kv_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab;
  j["max_position_embeddings"] = max_position;
  j["hidden_act"] = row->act == Activation::GeluTanh ? "gelu_pytorch_tanh" : "silu";
  j["rms_norm_eps"] = clean_float(rms_eps);
  j["rope_theta"] = clean_float(rope_theta);
  if (rope_scaling.type.empty()) {
    j["rope_scaling"] = nullptr;
  } else if (rope_scaling.type == "linear") {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", clean_float(rope_scaling.factor)}};
  } else if (rope_scaling.type == "yarn") {
    const RopeScaling& r = rope_scaling;
    j["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", clean_float(r.factor)},
                         {"beta_fast", clean_float(r.beta_fast)},
                         {"beta_slow", clean_float(r.beta_slow)},
                         {"truncate", r.truncate},
                         {"original_max_position_embeddings", r.original_max_position_embeddings}};
    if (r.attention_factor > 0) j["rope_scaling"]["attention_factor"] = clean_float(r.attention_factor);
  } else {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", clean_float(rope_scaling.factor)},
                         {"low_freq_factor", clean_float(rope_scaling.low_freq_factor)},
                         {"high_freq_factor", clean_float(rope_scaling.high_freq_factor)},
                         {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["bos_token_id"] = bos_token_id >= 0 ? json(bos_token_id) : json(nullptr);
  j["eos_token_id"] = eos_token_id >= 0 ? json(eos_token_id) : json(nullptr);
  if (pad_token_id >= 0) j["pad_token_id"] = pad_token_id;
  j["torch_dtype"] = torch_dtype;
  j["initializer_range"] = 0.02;
  j["attention_dropout"] = 0.0;
  j["use_cache"] = true;
  if (arch == "llama") {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  } else if (arch == "mistral") {
    j["sliding_window"] = nullptr;
  } else if (row->gemma_attention) {
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["attention_bias"] = false;
    j["query_pre_attn_scalar"] = clean_float(query_pre_attn_scalar);
    j["attn_logit_softcapping"] = attn_softcap > 0 ? json(clean_float(attn_softcap)) : json(nullptr);
    j["final_logit_softcapping"] = final_softcap > 0 ? json(clean_float(final_softcap)) : json(nullptr);
    j["sliding_window"] = sliding_window;
    json types = json::array();
    for (int i = 0; i < n_layers; ++i) types.push_back(is_sliding(i) ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    if (arch == "gemma3_text") {
      j["rope_local_base_freq"] = clean_float(rope_local_theta);
      // mlx_lm reads the period, not layer_types: the first global layer's position + 1, when
      // the layers follow that period (written only then).
      int period = 0;
      while (period < n_layers && is_sliding(period)) ++period;
      ++period;
      bool periodic = true;
      for (int i = 0; i < n_layers; ++i) periodic &= is_sliding(i) == ((i + 1) % period != 0);
      if (periodic) j["sliding_window_pattern"] = period;
    }
  } else if (row->fused_proj) {
    j["attention_bias"] = false;
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
    j["original_max_position_embeddings"] = max_position;
  } else if (arch == "mixtral") {
    j["num_local_experts"] = n_experts;
    j["num_experts_per_tok"] = n_experts_per_tok;
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
    j["router_jitter_noise"] = 0.0;
  } else if (arch == "gpt_oss") {
    j["attention_bias"] = true;
    j["num_local_experts"] = n_experts;
    j["num_experts_per_tok"] = n_experts_per_tok;
    j["swiglu_alpha"] = clean_float(swiglu_alpha);
    j["swiglu_limit"] = clean_float(swiglu_limit);
    j["sliding_window"] = sliding_window;
    json types = json::array();
    for (int i = 0; i < n_layers; ++i) types.push_back(is_sliding(i) ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    j["router_aux_loss_coef"] = 0.0;
  } else if (arch == "qwen3_moe") {
    j["attention_bias"] = false;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["num_experts"] = n_experts;
    j["num_experts_per_tok"] = n_experts_per_tok;
    j["moe_intermediate_size"] = moe_intermediate;
    j["norm_topk_prob"] = norm_topk_prob;
    // The dense layers as a list; with decoder_sparse_step 1 every layer not listed is sparse.
    j["decoder_sparse_step"] = 1;
    json dense = json::array();
    for (int i = 0; i < n_layers; ++i)
      if (!is_moe_layer(i)) dense.push_back(i);
    j["mlp_only_layers"] = dense;
  } else if (arch == "qwen2" || arch == "qwen3") {
    if (arch == "qwen3") j["attention_bias"] = false;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = n_layers;
  } else {  // rows added later: what their config class reads beyond the common keys
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    if (row->no_rope_layers) {
      json flags = json::array();
      for (int i = 0; i < n_layers; ++i) flags.push_back(has_rope(i) ? 1 : 0);
      j["no_rope_layers"] = flags;
    }
  }
  return j;
}

int64_t ModelConfig::n_params() const {
  const int64_t h = hidden, q = int64_t(n_heads) * head_dim, kv = int64_t(n_kv_heads) * head_dim;
  int64_t layer = h * q + 2 * h * kv + q * h  // q, k, v, o
                  + 2 * h;                    // two RMSNorms
  if (attention_bias) layer += q + 2 * kv;
  const ArchDesc& d = desc();
  if (d.qk_norm == QkNorm::PerHead) layer += 2 * int64_t(head_dim);
  if (d.qk_norm == QkNorm::Whole) layer += q + kv;
  layer -= 2 * h;  // the norms, counted by the row
  for (const char* n : {d.norms.attn_pre, d.norms.attn_post, d.norms.ffn_pre, d.norms.ffn_post})
    if (n) layer += h;
  int64_t ffn = 0;  // gate, up, down; a sparse layer's: the router and every expert's
  for (int i = 0; i < n_layers; ++i)
    ffn +=
        is_moe_layer(i) ? int64_t(n_experts) * (h + 3 * h * int64_t(moe_intermediate)) : 3 * h * int64_t(intermediate);
  if (d.attn_sinks) layer += h + n_heads;  // o_proj's bias, the sinks
  if (d.moe && d.moe->gpt_oss)             // the router's and the experts' biases
    for (int i = 0; i < n_layers; ++i)
      if (is_moe_layer(i)) ffn += n_experts + int64_t(n_experts) * (2 * int64_t(moe_intermediate) + h);
  int64_t embed = int64_t(vocab) * h;
  return embed * (tie_word_embeddings ? 1 : 2) + h + layer * n_layers + ffn;
}

}  // namespace qt
