// GGUF export. Which metadata, names and transforms, and where each comes from:
//  - architecture keys: formats/layouts/gguf_arch.h (convert_hf_to_gguf.py's per family);
//  - Gemma's norm weights stored as 1 + w; Phi-3's q/k/v and gate/up fused (attn_qkv, ffn_up);
//  - rope scaling: llama3 -> rope_freqs.weight (F32 divisors, LlamaModel.generate_extra_tensors),
//    linear -> rope.scaling.type/factor;
//  - names: checkpoint.cpp's table (hf_to_gguf_name); a tied model has no output.weight;
//  - Q/K rows: llama and mistral permuted into llama.cpp's interleaved RoPE order (LlamaModel.permute);
//  - types: 1-D tensors F32 (llama-quantize never quantizes them), 2-D the --gguf-type;
//  - general.file_type: llama.cpp's llama_ftype for the type (LLAMA_FTYPE_*).
#include "formats/layouts/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "formats/error.h"
#include "formats/fused_proj.h"
#include "formats/ggml_quantize.h"
#include "formats/gguf_writer.h"
#include "formats/layouts/gguf_arch.h"

namespace qt {

namespace {

struct TypeRow {
  const char* name;
  GgmlType type;
  uint32_t ftype;    // llama_ftype
  bool mix = false;  // llama.cpp's _M mix over `type` (k_mix_type below)
};
constexpr TypeRow kTypes[] = {
    {"f32", GgmlType::F32, 0},
    {"f16", GgmlType::F16, 1},
    {"bf16", GgmlType::BF16, 32},
    {"q8_0", GgmlType::Q8_0, 7},
    {"q4_0", GgmlType::Q4_0, 2},
    {"q4_1", GgmlType::Q4_1, 3},
    {"q5_0", GgmlType::Q5_0, 8},
    {"q5_1", GgmlType::Q5_1, 9},
    {"iq4_nl", GgmlType::IQ4_NL, 25},
    // llama-quantize's names Q4_K / Q5_K are aliases of Q4_K_M / Q5_K_M: the same file_type.
    {"q4_k", GgmlType::Q4_K, 15},
    {"q5_k", GgmlType::Q5_K, 17},
    {"q6_k", GgmlType::Q6_K, 18},
    {"q2_k", GgmlType::Q2_K, 10},
    {"q3_k", GgmlType::Q3_K, 12},
    {"q4_k_m", GgmlType::Q4_K, 15, true},
    {"q5_k_m", GgmlType::Q5_K, 17, true},
    {"q3_k_m", GgmlType::Q3_K, 12, true},
};

// llama.cpp's tensor_type_fallback (src/llama-quant.cpp) for a weight whose rows a 256-element
// super-block does not divide: Q2_K, Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 (the
// same for --pure).
// Other types have no fallback (nullopt).
std::optional<GgmlType> kquant_fallback(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: return GgmlType::Q4_0;
    case GgmlType::Q4_K: return GgmlType::Q5_0;
    case GgmlType::Q5_K: return GgmlType::Q5_1;
    case GgmlType::Q6_K: return GgmlType::Q8_0;
    default: return std::nullopt;
  }
}

const TypeRow& type_row(GgmlType t) {
  for (auto& r : kTypes)
    if (r.type == t) return r;
  throw std::logic_error("gguf export: type without a row");
}

// llama.cpp's Q4_K_M / Q5_K_M / Q3_K_M mixes (src/llama-quant.cpp llama_tensor_get_type_impl,
// restated for dense llama/qwen models: no MoE, not Falcon, not LLM_TYPE_70B), before the fallback:
//   output.weight, or token_embd.weight of a tied model (no output.weight): Q6_K, Q8_0 when its
//     rows 256 does not divide;
//   Q4_K_M, Q5_K_M: blk.N.attn_v.weight and blk.N.ffn_down.weight Q6_K in the layers use_more_bits
//     picks (the first n/8, the last n/8, and every third one between);
//   Q3_K_M: attn_v Q5_K in layers 0 and 1, else Q4_K; ffn_down Q5_K in the first n/16 layers, else
//     Q4_K; attn_output Q4_K;
//   everything else (token_embd of an untied model included): the base type (Q4_K / Q5_K / Q3_K).
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

GgmlType k_mix_type(GgmlType base, const std::string& gguf, int64_t cols, bool tied, int n_layers) {
  if (gguf == "output.weight" || (tied && gguf == "token_embd.weight"))
    return cols % 256 != 0 ? GgmlType::Q8_0 : GgmlType::Q6_K;
  if (gguf.rfind("blk.", 0) == 0) {
    const size_t dot = gguf.find('.', 4);
    const int layer = std::stoi(gguf.substr(4, dot - 4));
    const std::string rest = gguf.substr(dot + 1);
    if (base == GgmlType::Q3_K) {
      if (rest == "attn_v.weight") return layer < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
      if (rest == "ffn_down.weight") return layer < n_layers / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
      if (rest == "attn_output.weight") return GgmlType::Q4_K;
      return base;
    }
    if ((rest == "attn_v.weight" || rest == "ffn_down.weight") && use_more_bits(layer, n_layers)) return GgmlType::Q6_K;
  }
  return base;
}

// Natural tensor order: token_embd, rope_freqs, layers 0..N in llama.cpp's per-layer order,
// output_norm, output.
std::pair<int, int> gguf_order_key(const std::string& gguf) {
  static const char* kLayer[] = {"attn_norm.weight",   "attn_q.weight",      "attn_q.bias",     "attn_k.weight",
                                 "attn_k.bias",        "attn_v.weight",      "attn_v.bias",     "attn_q_norm.weight",
                                 "attn_k_norm.weight", "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
                                 "ffn_up.weight",      "ffn_down.weight"};
  if (gguf == "token_embd.weight") return {-2, 0};
  if (gguf == "rope_freqs.weight") return {-1, 0};
  if (gguf == "output_norm.weight") return {1 << 30, 0};
  if (gguf == "output.weight") return {1 << 30, 1};
  const size_t dot = gguf.find('.', 4);
  const int layer = std::stoi(gguf.substr(4, dot - 4));
  const std::string rest = gguf.substr(dot + 1);
  for (int i = 0; i < int(std::size(kLayer)); ++i)
    if (rest == kLayer[i]) return {layer, i};
  return {layer, 100};
}

void write_tokenizer(const Checkpoint& ck, GgufWriter* w) {
  if (!ck.tokenizer) return;  // a bare source: weights only (llama.cpp then needs --vocab-only elsewhere)
  GgufTokenizerMeta t = tokenizer_to_gguf(*ck.tokenizer);
  // convert_hf_to_gguf pads the token list to the config's vocab_size (embedding rows).
  for (int32_t i = int32_t(t.tokens.size()); i < ck.config.vocab; ++i) {
    t.tokens.push_back("[PAD" + std::to_string(i) + "]");
    t.token_type.push_back(5);  // UNUSED
    if (!t.scores.empty()) t.scores.push_back(-1000.0f);
  }
  if (int(t.tokens.size()) != ck.config.vocab)
    user_error("{}: the tokenizer has {} tokens, the embedding {} rows", ck.path, t.tokens.size(), ck.config.vocab);
  w->add_string("tokenizer.ggml.model", t.model);
  if (!t.pre.empty()) w->add_string("tokenizer.ggml.pre", t.pre);
  w->add_string_array("tokenizer.ggml.tokens", t.tokens);
  if (!t.scores.empty()) w->add_f32_array("tokenizer.ggml.scores", t.scores);
  w->add_i32_array("tokenizer.ggml.token_type", t.token_type);
  if (!t.merges.empty()) w->add_string_array("tokenizer.ggml.merges", t.merges);
  if (t.bos >= 0) w->add_u32("tokenizer.ggml.bos_token_id", uint32_t(t.bos));
  if (t.eos >= 0) w->add_u32("tokenizer.ggml.eos_token_id", uint32_t(t.eos));
  if (t.unk >= 0) w->add_u32("tokenizer.ggml.unknown_token_id", uint32_t(t.unk));
  if (t.pad >= 0) w->add_u32("tokenizer.ggml.padding_token_id", uint32_t(t.pad));
  w->add_bool("tokenizer.ggml.add_bos_token", t.add_bos);
  w->add_bool("tokenizer.ggml.add_eos_token", t.add_eos);
  if (t.add_space_prefix >= 0) w->add_bool("tokenizer.ggml.add_space_prefix", t.add_space_prefix == 1);
  if (!t.chat_template.empty()) w->add_string("tokenizer.chat_template", t.chat_template);
}

}  // namespace

const char* const kGgufExportTypes =
    "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, q3_k_m, q4_k_m, q5_k_m";

std::optional<GgmlType> gguf_export_type(const std::string& name) {
  for (auto& r : kTypes)
    if (name == r.name) return r.type;
  return std::nullopt;
}

bool gguf_export_is_mix(const std::string& name) {
  for (auto& r : kTypes)
    if (name == r.name) return r.mix;
  return false;
}

namespace {

// The rows of a packed [rows, cols] weight (row_bytes each) in llama.cpp's Q/K order: the
// permutation gguf_permute_rows applies, read off a column of row numbers.
std::vector<uint8_t> permute_packed_rows(const std::vector<uint8_t>& src, int64_t rows, int n_heads) {
  std::vector<float> idx(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) idx[size_t(r)] = float(r);
  const std::vector<float> p = gguf_permute_rows(idx.data(), rows, 1, n_heads);
  const size_t row_bytes = src.size() / size_t(rows);
  std::vector<uint8_t> out(src.size());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + size_t(r) * row_bytes, src.data() + size_t(p[size_t(r)]) * row_bytes, row_bytes);
  return out;
}

void write_gguf(const Checkpoint& ck, const std::string& path, const GgufExportOptions& opt,
                std::map<std::string, GgmlType>* types_only);

}  // namespace

std::map<std::string, GgmlType> gguf_weight_types(const Checkpoint& ck, const GgufExportOptions& opt) {
  std::map<std::string, GgmlType> types;
  write_gguf(ck, "", opt, &types);
  return types;
}

void write_gguf_file(const Checkpoint& ck, const std::string& path, const GgufExportOptions& opt) {
  write_gguf(ck, path, opt, nullptr);
}

namespace {

// types_only: stop once every tensor's type is known and report them there, writing nothing.
void write_gguf(const Checkpoint& ck, const std::string& path, const GgufExportOptions& opt,
                std::map<std::string, GgmlType>* types_only) {
  const ModelConfig& c = ck.config;
  const char* arch = c.desc().gguf_arch;  // llama.cpp's general.architecture (mistral's is "llama")
  if (!*arch)
    user_error(
        "{}: architecture '{}' cannot be exported to GGUF (supported: llama, mistral, qwen2, qwen3, gemma2, "
        "gemma3_text, phi3)",
        ck.path, c.arch);
  const TypeRow& tr = type_row(opt.type);
  const GgmlTypeRow& block = *ggml_type_row(uint32_t(opt.type));

  // Every tensor's name, type and transform first: a bad shape is refused before writing.
  struct Item {
    std::string gguf, hf;
    GgmlType type;
    int permute_heads;
  };
  std::vector<Item> items;
  std::map<std::string, int> fallbacks;  // "Q5_0 (... for Q4_K)" -> how many weights
  std::map<std::string, int> mix;        // --gguf-type q4_k_m: type -> how many weights
  const bool tied = c.tie_word_embeddings || !ck.tensors.count("lm_head.weight");
  // Phi-3: q/k/v and gate/up written fused, as attn_qkv and ffn_up (Phi3MiniModel keeps HF's fused
  // tensors); the parts are concatenated when their turn comes.
  std::map<std::string, Tensor> fused;
  if (c.desc().fused_proj) fused = ck.tensors, fuse_projections(c, fused);
  const std::map<std::string, Tensor>& tensors = c.desc().fused_proj ? fused : ck.tensors;
  for (auto& [hf, t] : tensors) {
    if (hf == "lm_head.weight" && c.tie_word_embeddings) continue;
    const std::string g = hf_to_gguf_name(hf, c.desc());
    if (g.empty()) user_error("{}: tensor {} has no GGUF name", ck.path, hf);
    if (!is_float(t.dtype)) user_error("{}: tensor {} is {}, not a float tensor", ck.path, hf, dtype_name(t.dtype));
    Item it{g, hf, t.shape.size() == 1 ? GgmlType::F32 : opt.type, 0};
    if (opt.k_mix && t.shape.size() == 2) it.type = k_mix_type(opt.type, g, t.shape[1], tied, c.n_layers);
    if (t.shape.size() == 2 && t.shape[1] % ggml_type_row(uint32_t(it.type))->block_size != 0 &&
        kquant_fallback(it.type)) {
      const GgmlType want = it.type;
      it.type = *kquant_fallback(want);
      ++fallbacks[std::string(ggml_type_row(uint32_t(it.type))->name) + " (llama-quantize's fallback for " +
                  ggml_type_row(uint32_t(want))->name + ")"];
    }
    if (opt.k_mix && t.shape.size() == 2) ++mix[ggml_type_row(uint32_t(it.type))->name];
    if (t.shape.size() == 2 && t.shape[1] % ggml_type_row(uint32_t(it.type))->block_size != 0)
      user_error(
          "{}: tensor {} {} has rows of {} elements, not a multiple of {}'s block of {} (llama-quantize "
          "would store it as f16; convert it with --gguf-type f16 or f32)",
          ck.path, hf, g, t.shape[1], ggml_type_row(uint32_t(it.type))->name,
          ggml_type_row(uint32_t(it.type))->block_size);
    if (c.gguf_permutes_qk() && hf.find(".self_attn.q_proj.") != std::string::npos) it.permute_heads = c.n_heads;
    if (c.gguf_permutes_qk() && hf.find(".self_attn.k_proj.") != std::string::npos) it.permute_heads = c.n_kv_heads;
    items.push_back(it);
  }
  if (types_only) {
    for (const Item& it : items)
      if (tensors.at(it.hf).shape.size() == 2) (*types_only)[it.hf] = it.type;
    return;
  }
  for (auto& [name, n] : fallbacks)
    std::printf("%d weights with rows not a multiple of 256 stored as %s\n", n, name.c_str());
  if (opt.k_mix) {
    std::string m;
    for (auto& [name, n] : mix) m += (m.empty() ? "" : ", ") + std::to_string(n) + " " + name;
    std::printf("llama.cpp's %s_M mix: %s\n", ggml_type_row(uint32_t(opt.type))->name, m.c_str());
  }
  if (c.rope_scaling.type == "llama3") items.push_back({"rope_freqs.weight", "", GgmlType::F32, 0});
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return gguf_order_key(a.gguf) < gguf_order_key(b.gguf); });

  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", opt.name);
  write_gguf_arch_keys(c, tr.ftype, ck.path, &w);
  if (block.block_size > 1) w.add_u32("general.quantization_version", 2);  // GGML_QNT_VERSION
  write_tokenizer(ck, &w);

  int weighted = 0;
  for (const Item& it : items) {
    if (it.gguf == "rope_freqs.weight") {
      std::vector<double> f = llama3_rope_factors(c.rope_scaling, c.rope_theta, c.head_dim);
      std::vector<float> ff(f.begin(), f.end());
      w.add_tensor(it.gguf, {int64_t(ff.size())}, GgmlType::F32, [ff] {
        std::vector<uint8_t> b(ff.size() * 4);
        std::memcpy(b.data(), ff.data(), b.size());
        return b;
      });
      continue;
    }
    const Tensor& t = tensors.at(it.hf);
    // Gemma's RMSNorm weights are stored as 1 + w, in float32 (GemmaModel.modify_tensors).
    const bool plus_one =
        c.desc().norm_plus_one && it.hf.size() > 11 && it.hf.compare(it.hf.size() - 11, 11, "norm.weight") == 0;
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    const std::vector<uint8_t>* pre = opt.packed && t.shape.size() == 2 ? opt.packed(it.hf) : nullptr;
    const float* imp = nullptr;
    if (!pre && opt.importance && t.shape.size() == 2 && block.block_size > 1) {
      // A fused weight's input is its first part's (q_proj's, gate_proj's).
      std::string in_of = it.hf;
      for (auto [f, part] :
           {std::pair{".qkv_proj.weight", ".q_proj.weight"}, std::pair{".gate_up_proj.weight", ".gate_proj.weight"}})
        if (in_of.size() > std::strlen(f) && in_of.compare(in_of.size() - std::strlen(f), std::strlen(f), f) == 0)
          in_of = in_of.substr(0, in_of.size() - std::strlen(f)) + part;
      imp = opt.importance(in_of, t.shape[1]);
      if (imp) ++weighted;
    }
    if (pre) {
      if (pre->size() != ggml_nbytes(it.type, size_t(t.shape[0] * t.shape[1])))
        throw std::logic_error("gguf export: precomputed blocks of " + it.hf + " have the wrong size");
      w.add_tensor(it.gguf, ne, it.type, [pre, it, rows = t.shape[0]] {
        return it.permute_heads ? permute_packed_rows(*pre, rows, it.permute_heads) : *pre;
      });
      continue;
    }
    w.add_tensor(it.gguf, ne, it.type, [t, it, imp, plus_one] {
      // Made now, when its turn comes: one tensor's fp32 copy at a time.
      Tensor src = materialize(t);
      std::vector<float> v = to_f32(src);
      release_pages(src);
      src = Tensor{};
      if (it.permute_heads) {
        const int64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
        v = gguf_permute_rows(v.data(), rows, cols, it.permute_heads);
      }
      if (plus_one)
        for (float& x : v) x += 1.0f;
      std::vector<uint8_t> out(ggml_nbytes(it.type, v.size()));
      if (imp)
        ggml_quantize_weighted(it.type, v.data(), t.shape[0], t.shape[1], imp, out.data());
      else
        ggml_quantize(it.type, v.data(), v.size(), out.data());
      return out;
    });
  }
  w.write(path);
  if (opt.importance) std::printf("imatrix: %d weights quantized with importance weights\n", weighted);
}

}  // namespace

}  // namespace qt
