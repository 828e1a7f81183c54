#include "formats/layouts/hf.h"
#include "formats/fused_proj.h"
#include "formats/gpt_oss_experts.h"

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "formats/error.h"
#include "formats/mapped_file.h"
#include "formats/safetensors.h"

namespace qt {

namespace fs = std::filesystem;
using nlohmann::json;

std::string torch_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    default: user_error("dtype {} cannot be a Hugging Face export dtype (f32, f16, bf16)", dtype_name(t));
  }
}

namespace {

// Cast a float tensor to F32/F16/BF16, rounding to nearest even (as torch's .to() does).
Tensor cast(const Tensor& t, DType to) {
  if (t.dtype == to) return t;  // shares the source's storage
  if (to == DType::F32 && t.dtype != DType::F64) return Tensor::from_f32(to_f32(t), t.shape);
  std::vector<float> tmp;
  const float* src;
  if (t.dtype == DType::F32) {
    src = t.as<float>();
  } else {
    tmp = to_f32(t);
    src = tmp.data();
  }
  const int64_t n = t.numel();
  if (to == DType::F32) return Tensor::from_f32(std::vector<float>(src, src + n), t.shape);
  std::vector<uint8_t> bytes(size_t(n) * 2);
  uint16_t* dst = reinterpret_cast<uint16_t*>(bytes.data());
  if (to == DType::BF16) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
  }
  return Tensor::owned_bytes(to, t.shape, std::move(bytes));
}

// `t` as `to`, made only when its shard is written (safetensors' writer materializes it): the
// cast copy of a tensor exists while its batch is written, not for the whole model.
Tensor deferred_cast(const Tensor& t, DType to) {
  if (t.dtype == to) return t;
  return deferred_tensor(to, t.shape, [t, to] {
    Tensor src = materialize(t);
    Tensor r = cast(src, to);
    release_pages(src);
    return r;
  });
}

// Natural order: embedding, layers 0, 1, ..., 10 (not 0, 1, 10, 2), final norm, lm_head;
// shards then hold whole layers in sequence, as transformers writes them.
std::pair<int, std::string> hf_order_key(const std::string& name) {
  static constexpr std::string_view kPrefix = "model.layers.";
  if (name == "model.embed_tokens.weight") return {-1, name};
  if (name.rfind(kPrefix, 0) == 0) {
    size_t i = kPrefix.size(), j = i;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    if (j > i && j - i < 8) return {std::stoi(name.substr(i, j - i)), name};
  }
  return {1 << 30, name};
}

void write_json(const fs::path& p, const json& j) {
  std::string s = j.dump(2, ' ', false) + "\n";
  write_file_atomic(p.string(), s.data(), s.size());
}

}  // namespace

void write_hf_folder(const Checkpoint& ck, const std::string& dir, const HfWriteOptions& opt) {
  const std::string out_dtype = torch_dtype_name(opt.dtype);

  std::vector<std::string> names;
  std::map<std::string, Tensor> all = ck.tensors;
  for (const std::string& name : opt.omit_tensors) all.erase(name);
  all.insert(opt.extra_tensors.begin(), opt.extra_tensors.end());
  if (ck.config.desc().fused_proj) fuse_projections(ck.config, all);  // phi3: the names transformers loads
  if (ck.config.desc().moe && ck.config.desc().moe->gpt_oss) fuse_gpt_oss_experts(ck.config, all);
  for (auto& [name, t] : all) {
    if (name == "lm_head.weight" && ck.config.tie_word_embeddings) continue;  // tied: docs/spec/gguf.md
    names.push_back(name);
  }
  std::sort(names.begin(), names.end(),
            [](const std::string& a, const std::string& b) { return hf_order_key(a) < hf_order_key(b); });
  NamedTensors tensors;
  tensors.reserve(names.size());
  const Multimodal* mm = ck.multimodal.get();
  for (auto& name : names) {
    const Tensor& t = all.at(name);
    tensors.emplace_back(mm ? mm->to_folder_name(name) : name,
                         is_float(t.dtype) && !opt.keep_dtype.count(name) ? deferred_cast(t, opt.dtype) : t);
  }
  // A vision-language model's vision tower and projector: as stored, after the language model.
  if (mm)
    for (auto& [name, t] : mm->passthrough) tensors.emplace_back(name, t);
  write_safetensors_sharded(dir, tensors, opt.metadata, opt.max_shard_bytes);

  const fs::path d(dir);
  if (mm) {  // its own config.json, processor and tokenizer files
    write_json(d / "config.json", multimodal_config_json(*mm, out_dtype, opt.extra_config));
    copy_multimodal_side_files(*mm, dir);
    return;
  }
  json cfg = ck.config.to_hf_json();
  cfg["torch_dtype"] = out_dtype;
  if (opt.extra_config.is_object()) cfg.update(opt.extra_config);
  write_json(d / "config.json", cfg);
  if (ck.tokenizer) {  // a source without one (a bare test GGUF) gives a weights-only folder
    write_json(d / "tokenizer.json", ck.tokenizer->to_hf_tokenizer_json());
    write_json(d / "tokenizer_config.json", ck.tokenizer->to_hf_tokenizer_config());
  }
  if (opt.generation_config) {
    json gen = {{"_from_model_config", true}};
    if (ck.config.bos_token_id >= 0) gen["bos_token_id"] = ck.config.bos_token_id;
    if (ck.config.eos_token_id >= 0) gen["eos_token_id"] = ck.config.eos_token_id;
    if (ck.config.pad_token_id >= 0) gen["pad_token_id"] = ck.config.pad_token_id;
    write_json(d / "generation_config.json", gen);
  }
}

}  // namespace qt
