// load_checkpoint: GGUF file or Hugging Face folder -> Checkpoint (HF names, HF layout).
// Facts: docs/spec/gguf.md §Tied embeddings, §rope_freqs; docs/spec/safetensors.md §Sharded checkpoints.
#include "formats/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string_view>

#include <omp.h>

#include "formats/error.h"
#include "formats/fused_proj.h"
#include "formats/gpt_oss_experts.h"
#include "formats/gguf.h"
#include "formats/layouts/bnb.h"
#include "formats/layouts/compressed_tensors.h"
#include "formats/layouts/mlx.h"
#include "formats/layouts/mlx_moe.h"
#include "formats/layouts/native.h"
#include "formats/mapped_file.h"
#include "formats/safetensors.h"
#include "formats/vlm.h"

namespace qt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Every expected tensor present with its shape; nothing else.
void check_tensor_set(const std::string& path, const ModelConfig& c,
                      const std::map<std::string, std::vector<int64_t>>& got) {
  auto want = expected_tensor_shapes(c);
  for (auto& [name, shape] : got) {
    auto it = want.find(name);
    if (it == want.end()) user_error("{}: tensor {} is not part of a {} model", path, name, c.arch);
    if (it->second != shape)
      user_error("{}: tensor {} has shape {}, expected {}", path, name, shape_text(shape), shape_text(it->second));
  }
  for (auto& [name, shape] : want)
    if (!got.count(name)) user_error("{}: missing tensor {}", path, name);
}

// config.json's quantization_config {"quant_method": "mxfp4"} on a gpt_oss model (the released
// checkpoints: experts in MXFP4, everything else bf16).
bool is_mxfp4_experts_config(const json& j) {
  if (!j.is_object() || !j.contains("quantization_config") || j.value("model_type", "") != "gpt_oss") return false;
  const json& q = j["quantization_config"];
  return q.is_object() && q.contains("quant_method") && q["quant_method"] == "mxfp4";
}

json read_json_file(const std::string& path) {
  MappedFile mf = map_file(path);
  try {
    return json::parse(mf.data, mf.data + mf.size);
  } catch (const json::exception& e) {
    // nlohmann's message is one line: "[json.exception.parse_error.101] parse error at line 3, ..."
    std::string msg = e.what();
    if (auto p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    user_error("{}: invalid JSON: {}", path, msg);
  }
}

// ---------------------------------------------------------------------------------------- GGUF

// Phi-3's fused GGUF tensors (attn_qkv, ffn_up holding gate_up) stand for their parts: shapes and
// the quantization record per part (each part's share of the bytes by rows) for the checks and
// the readers of ck.quantization; a fused tensor of the wrong shape is left for the check to name.
void split_fused_shapes(const ModelConfig& c, std::map<std::string, std::vector<int64_t>>& shapes, json& qinfo) {
  const int64_t q = int64_t(c.n_heads) * c.head_dim, kv = int64_t(c.n_kv_heads) * c.head_dim, f = c.intermediate;
  const std::pair<const char*, std::vector<std::pair<const char*, int64_t>>> fused[] = {
      {"self_attn.qkv_proj.weight",
       {{"self_attn.q_proj.weight", q}, {"self_attn.k_proj.weight", kv}, {"self_attn.v_proj.weight", kv}}},
      {"mlp.gate_up_proj.weight", {{"mlp.gate_proj.weight", f}, {"mlp.up_proj.weight", f}}}};
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (auto& [name, parts] : fused) {
      auto it = shapes.find(p + name);
      int64_t total = 0;
      for (auto& pr : parts) total += pr.second;
      if (it == shapes.end() || it->second != std::vector<int64_t>{total, c.hidden}) continue;
      const json info = qinfo[p + name];
      shapes.erase(it);
      qinfo.erase(p + name);
      for (auto& [part, rows] : parts) {
        shapes[p + part] = {rows, c.hidden};
        json e = info;
        e["nbytes"] = info["nbytes"].get<uint64_t>() * uint64_t(rows) / uint64_t(total);
        qinfo[p + part] = e;
      }
    }
  }
}

Checkpoint load_gguf(const std::string& path, LoadMode mode) {
  auto gp = std::make_shared<const GgufFile>(GgufFile::open(path));
  const GgufFile& g = *gp;
  Checkpoint ck;
  ck.path = path;
  ck.source_kind = "gguf";
  ck.config = ModelConfig::from_gguf(g);
  const ModelConfig& c = ck.config;

  struct Job {
    GgufTensorInfo info;  // a stacked expert tensor's: one expert's slice
    std::string hf;
    int permute_heads;  // 0: rows stay as they are
  };
  std::vector<Job> jobs;
  std::map<std::string, std::vector<int64_t>> shapes;
  json qinfo = json::object();
  for (auto& t : g.tensors()) {
    if (t.name == "rope_freqs.weight") continue;  // folded into config.rope_scaling
    // A stacked expert tensor [n_experts, rows, cols] (gpt-oss's biases: [n_experts, rows]):
    // expert e is the e-th of n_experts equal byte ranges (whole rows, so whole blocks), loaded as
    // its own [rows, cols] ([rows]) tensor.
    if (const std::vector<std::string> parts = gguf_expert_parts(t.name, c); !parts.empty()) {
      const size_t dims = t.name.compare(t.name.size() - 5, 5, ".bias") == 0 ? 2 : 3;
      if (t.ne.size() != dims || t.ne.back() != int64_t(parts.size()))
        user_error("{}: tensor {} has shape {}, not [{}, rows{}]", path, t.name, shape_text(t.torch_shape()),
                   parts.size(), dims == 3 ? ", cols" : "");
      for (size_t e = 0; e < parts.size(); ++e) {
        GgufTensorInfo x = t;
        x.ne.pop_back();
        x.nbytes = t.nbytes / parts.size();
        x.data = t.data ? t.data + e * x.nbytes : nullptr;
        if (shapes.count(parts[e])) user_error("{}: tensor {} appears twice", path, t.name);
        shapes[parts[e]] = x.torch_shape();
        const GgmlTypeRow* row = ggml_type_row(uint32_t(t.type));
        qinfo[parts[e]] = {{"gguf_name", t.name}, {"ggml_type", row ? row->name : "?"}, {"nbytes", x.nbytes}};
        jobs.push_back({std::move(x), parts[e], 0});
      }
      continue;
    }
    std::string hf = gguf_to_hf_name(t.name, c.desc());
    if (hf.empty()) user_error("{}: tensor {} has no Hugging Face counterpart", path, t.name);
    if (shapes.count(hf)) user_error("{}: tensor {} appears twice", path, t.name);
    shapes[hf] = t.torch_shape();
    int heads = 0;
    if (c.gguf_permutes_qk()) {
      if (hf.find(".self_attn.q_proj.") != std::string::npos) heads = c.n_heads;
      if (hf.find(".self_attn.k_proj.") != std::string::npos) heads = c.n_kv_heads;
    }
    jobs.push_back({t, hf, heads});
    const GgmlTypeRow* row = ggml_type_row(uint32_t(t.type));
    qinfo[hf] = {{"gguf_name", t.name}, {"ggml_type", row ? row->name : "?"}, {"nbytes", t.nbytes}};
  }
  // Phi-3's fused qkv / gate_up: checked and recorded per part (split below, after dequantizing).
  if (c.desc().fused_proj) split_fused_shapes(c, shapes, qinfo);
  check_tensor_set(path, c, shapes);

  // Gemma's RMSNorm scales by 1 + w; convert_hf_to_gguf.py stores 1 + w (GemmaModel.modify_tensors,
  // in float32), llama.cpp multiplies by the stored value. The checkpoint holds w, as HF does.
  const bool plus_one = c.desc().norm_plus_one;
  auto dequantize = [gp, plus_one](const Job& j) {
    std::vector<int64_t> shape = j.info.torch_shape();
    std::vector<float> v = gp->dequantize(j.info);
    if (j.permute_heads) {
      int64_t rows = shape[0], cols = int64_t(v.size()) / std::max<int64_t>(rows, 1);
      v = gguf_unpermute_rows(v.data(), rows, cols, j.permute_heads);
    }
    if (plus_one && j.hf.size() > 11 && j.hf.compare(j.hf.size() - 11, 11, "norm.weight") == 0)
      for (float& x : v) x -= 1.0f;
    return Tensor::from_f32(std::move(v), std::move(shape));
  };
  // Native: the projections and the embedding in a block type stay as stored, for a Linear over
  // the blocks (Phi-3's fused projections are split as fp32 below, so they are dequantized).
  if (mode == LoadMode::Native && !c.desc().fused_proj) {
    std::vector<Job> rest;
    for (Job& j : jobs) {
      const GgmlTypeRow* row = ggml_type_row(uint32_t(j.info.type));
      const std::vector<int64_t> shape = j.info.torch_shape();
      const bool linear =
          j.hf.ends_with("_proj.weight") || j.hf == "lm_head.weight" || j.hf == "model.embed_tokens.weight";
      if (!row || !row->to_float || row->block_size == 1 || shape.size() != 2 || !linear || !j.info.data) {
        rest.push_back(std::move(j));
        continue;
      }
      GgmlWeight w;
      w.type = uint32_t(j.info.type);
      w.data = j.info.data;
      w.nbytes = j.info.nbytes;
      w.rows = shape[0];
      w.cols = shape[1];
      w.row_bytes = j.info.nbytes / size_t(std::max<int64_t>(w.rows, 1));
      if (j.permute_heads) {  // the GGUF row of each HF row: the permutation applied to the row numbers
        std::vector<float> ids(size_t(w.rows));
        for (int64_t r = 0; r < w.rows; ++r) ids[size_t(r)] = float(r);
        const std::vector<float> hf_order = gguf_unpermute_rows(ids.data(), w.rows, 1, j.permute_heads);
        w.row_of.assign(hf_order.begin(), hf_order.end());
      }
      w.owner = gp;
      w.mapped = true;  // GGUF files are always mapped (formats/mapped_file.cpp)
      ck.ggml_weights.emplace(j.hf, std::move(w));
      ck.tensors.emplace(j.hf, deferred_tensor(DType::F32, shape, [dequantize, j] { return dequantize(j); }));
    }
    jobs = std::move(rest);
  }
  if (mode == LoadMode::Deferred) {
    for (const Job& j : jobs)
      ck.tensors.emplace(j.hf,
                         deferred_tensor(DType::F32, j.info.torch_shape(), [dequantize, j] { return dequantize(j); }));
  } else {
    // Dequantize tensors in parallel, largest first so no thread is left with the embedding at
    // the end. (ggml_dequantize's own parallel loop runs single-threaded when nested here.)
    std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.info.numel() > b.info.numel(); });
    std::vector<Tensor> out(jobs.size());
    std::vector<std::exception_ptr> errors(jobs.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t k = 0; k < jobs.size(); ++k) {
      try {
        out[k] = dequantize(jobs[k]);
      } catch (...) {
        errors[k] = std::current_exception();
      }
    }
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    for (size_t k = 0; k < jobs.size(); ++k) ck.tensors.emplace(jobs[k].hf, std::move(out[k]));
  }

  if (c.desc().fused_proj) split_fused_projections(c, ck.tensors, path);
  ck.quantization = {{"format", "gguf"},
                     {"version", g.version()},
                     {"file_type", g.get_int_or("general.file_type", -1)},
                     {"tensors", std::move(qinfo)}};
  if (g.has("tokenizer.ggml.model")) ck.tokenizer = tokenizer_from_gguf(g);
  return ck;
}

// ------------------------------------------------------------------------------ HF folder

Checkpoint load_quantized_dir(const std::string& dir, const json& j, const std::string& cfg_path,
                              const std::string& kind);

Checkpoint load_hf_dir(const std::string& dir) {
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  if (!fs::is_regular_file(cfg_path)) user_error("{}: no config.json", dir);
  json j = read_json_file(cfg_path);
  // Quantized folders (mlx, native): tensors as stored, described in ck.quantization.
  std::string qkind;
  if (is_mlx_quantized_config(j))
    qkind = "mlx";
  else if (is_native_quantized_config(j))
    qkind = "native";
  else if (is_ct_quantized_config(j))
    qkind = "compressed-tensors";
  else if (is_bnb_quantized_config(j))
    qkind = "bnb";
  else if (is_mxfp4_experts_config(j)) {
    // gpt_oss as released: only the experts are MXFP4, dequantized at load (formats/gpt_oss_experts.h)
  } else if (j.is_object() && j.contains("quantization_config")) {
    auto& q = j["quantization_config"];
    std::string method = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
                             ? q["quant_method"].get<std::string>()
                             : "?";
    user_error("{}: quantized checkpoints ('{}') are not supported yet", cfg_path, method);
  }
  if (std::string why = unsupported_multimodal(j); !why.empty()) user_error("{}: {}", cfg_path, why);
  if (!qkind.empty()) return load_quantized_dir(dir, j, cfg_path, qkind);
  Checkpoint ck;
  ck.path = dir;
  ck.source_kind = "hf";
  const bool vlm = is_multimodal_config(j);
  ck.config = ModelConfig::from_hf_json(vlm ? multimodal_text_config(j, cfg_path) : j, cfg_path);

  SafetensorsDir st = load_safetensors_dir(dir);
  if (vlm)  // the language model under the decoder's names; the vision tower and projector aside
    ck.multimodal = std::make_shared<const Multimodal>(split_multimodal(dir, j, st.tensors));
  if (ck.config.desc().fused_proj) split_fused_projections(ck.config, st.tensors, dir);  // phi3
  if (ck.config.desc().moe && ck.config.desc().moe->gpt_oss) split_gpt_oss_experts(ck.config, st.tensors, dir);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& [name, t] : st.tensors) {
    // Old exports carry the RoPE table; tied checkpoints sometimes carry a copy of the embedding
    // that transformers ignores (it ties). Neither is a weight of the model.
    if (name.size() > 21 && name.compare(name.size() - 21, 21, "rotary_emb.inv_freq") == 0) continue;
    if (name == "lm_head.weight" && ck.config.tie_word_embeddings) continue;
    if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
      user_error("{}: tensor {} has dtype {}; expected F32, F16 or BF16", dir, name, dtype_name(t.dtype));
    shapes[name] = t.shape;
    ck.tensors.emplace(name, t);
  }
  check_tensor_set(dir, ck.config, shapes);
  if (fs::exists(fs::path(dir) / "tokenizer.json")) ck.tokenizer = tokenizer_from_hf_dir(dir);
  return ck;
}

Checkpoint load_quantized_dir(const std::string& dir, const json& j, const std::string& cfg_path,
                              const std::string& kind) {
  Checkpoint ck;
  ck.path = dir;
  ck.source_kind = kind;
  const bool vlm = is_multimodal_config(j);
  ck.config = ModelConfig::from_hf_json(vlm ? multimodal_text_config(j, cfg_path) : j, cfg_path);
  SafetensorsDir st = load_safetensors_dir(dir);
  if (vlm) ck.multimodal = std::make_shared<const Multimodal>(split_multimodal(dir, j, st.tensors));
  // mlx_lm's stacked experts (switch_mlp) become the experts' own tensors, config entries included.
  json jm;
  if (kind == "mlx" && ck.config.is_moe()) {
    jm = j;
    unstack_mlx_experts(ck.config, dir, &st.tensors, &jm["quantization"]);
  }
  // bitsandbytes leaves gpt_oss's fused experts float (its loader quantizes Linears only), stored
  // fused as transformers saves them: split like an unquantized folder's.
  if (kind == "bnb" && ck.config.desc().moe && ck.config.desc().moe->gpt_oss)
    split_gpt_oss_experts(ck.config, st.tensors, dir);
  for (auto& [name, t] : st.tensors) {
    if (name.size() > 21 && name.compare(name.size() - 21, 21, "rotary_emb.inv_freq") == 0) continue;
    ck.tensors.emplace(name, t);
  }
  ck.quantization = kind == "mlx"                  ? mlx_describe(dir, jm.is_null() ? j : jm, ck.tensors, st.metadata)
                    : kind == "compressed-tensors" ? ct_describe(dir, j, ck.tensors)
                    : kind == "bnb"                ? bnb_describe(dir, j, ck.tensors)
                                                   : native_describe(dir, j);
  if (ck.config.desc().fused_proj) split_fused_quantized(ck.config, ck.tensors, ck.quantization, dir);  // phi3
  check_quantized_tensor_set(dir, ck.config, ck.tensors, ck.quantization);
  if (fs::exists(fs::path(dir) / "tokenizer.json")) ck.tokenizer = tokenizer_from_hf_dir(dir);
  return ck;
}

bool has_gguf_magic(const std::string& path) {
  MappedFile mf = map_file(path);
  return mf.size >= 4 && std::memcmp(mf.data, "GGUF", 4) == 0;
}

}  // namespace

Checkpoint load_checkpoint(const std::string& path, LoadMode mode) {
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) user_error("{}: no such file or folder", path);
  if (fs::is_directory(st)) return load_hf_dir(path);
  if (!fs::is_regular_file(st)) user_error("{}: not a file or folder", path);
  // Sniff the magic rather than trust the extension; a .gguf with the wrong magic goes to the
  // GGUF reader, whose error says what is wrong.
  if (has_gguf_magic(path) || fs::path(path).extension() == ".gguf") return load_gguf(path, mode);
  user_error("{}: not a GGUF file or a Hugging Face folder", path);
}

}  // namespace qt
