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
#include <regex>

#include "formats/error.h"
#include "formats/fused_proj.h"
#include "formats/ggml_quantize.h"
#include "formats/gguf_writer.h"
#include "formats/gguf.h"
#include "formats/gpt_oss_experts.h"
#include "formats/layouts/gguf_arch.h"

namespace qt {

namespace {

// A llama.cpp mix (src/llama-quant.cpp llama_tensor_get_type_impl, restated: not Falcon, not its
// 70B case) bumps some tensors of a kind above the base type. `i` is the tensor's index among those
// of its kind that the mix decided so far and `n` how many there are (attn_v: every attn_v /
// attn_qkv / attn_kv_b weight; ffn_down: the layer count), as llama.cpp's counters
// i_attention_wv / i_ffn_down; in a mixture of experts ffn_down's `i` is the layer in the name.
enum class When : uint8_t {
  Never,
  Always,
  MoreBits,          // use_more_bits(i, n): i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2
  Below2,            // i < 2
  Below4,            // i < 4
  BelowN16,          // i < n/16
  BelowN8,           // i < n/8
  Gqa4,              // n_heads / n_kv_heads >= 4
  BelowN8NoImatrix,  // i < n/8, only without an imatrix
};
constexpr GgmlType kBase = GgmlType(~0u);  // the mix's base type
struct Rule {
  When when = When::Never;
  GgmlType then = kBase, otherwise = kBase;
};

// --gguf-type names. A plain row is every 2-D weight in `type` (llama-quantize --pure); a mix row is
// llama-quantize's own recipe for that file_type: output.weight (or a tied token_embd) Q6_K, or
// Q8_0 when the base type's block does not divide its rows; attn_v, ffn_down and attn_output by
// their rules; everything else (an untied token_embd included) `type`. With 8 experts
// (hparams.n_expert == 8) attn_v and attn_k are Q8_0 and attn_output follows attn_output_8x
// instead. The router (ffn_gate_inp) stays F32: llama-quantize never quantizes it.
struct TypeRow {
  const char* name;
  GgmlType type;
  uint32_t ftype;  // general.file_type: llama.cpp's llama_ftype
  bool mix = false;
  Rule attn_v = {}, ffn_down = {}, attn_output = {}, attn_output_8x = {};
  // llama-quantize's MXFP4_MOE (src/llama-quant.cpp llama_tensor_get_type_impl): every stacked
  // expert tensor (ne[2] > 1) MXFP4, every other quantizable weight Q8_0, output.weight included.
  bool mxfp4_moe = false;
};
using G = GgmlType;
constexpr TypeRow kTypes[] = {
    {"f32", G::F32, 0},
    {"f16", G::F16, 1},
    {"bf16", G::BF16, 32},
    {"q8_0", G::Q8_0, 7},
    {"q4_0", G::Q4_0, 2},
    {"q4_1", G::Q4_1, 3},
    {"q5_0", G::Q5_0, 8},
    {"q5_1", G::Q5_1, 9},
    {"iq4_nl", G::IQ4_NL, 25},
    // llama-quantize's names Q4_K / Q5_K are aliases of Q4_K_M / Q5_K_M: the same file_type.
    {"q4_k", G::Q4_K, 15},
    {"q5_k", G::Q5_K, 17},
    {"q6_k", G::Q6_K, 18},
    {"q2_k", G::Q2_K, 10},
    {"q3_k", G::Q3_K, 12},
    {"iq4_xs", G::IQ4_XS, 30},
    {"mxfp4", G::MXFP4, 38},  // llama-quantize --pure MXFP4_MOE
    {"q2_k_mix",
     G::Q2_K,
     10,
     true,
     {When::Gqa4, G::Q4_K, G::Q3_K},
     {When::Always, G::Q3_K},
     {When::Always, G::Q3_K},
     {When::Always, G::Q5_K}},
    {"q3_k_s", G::Q3_K, 11, true, {}, {}, {}, {When::Always, G::Q5_K}},
    {"q3_k_m",
     G::Q3_K,
     12,
     true,
     {When::Below2, G::Q5_K, G::Q4_K},
     {When::BelowN16, G::Q5_K, G::Q4_K},
     {When::Always, G::Q4_K},
     {When::Always, G::Q5_K}},
    {"q3_k_l", G::Q3_K, 13, true, {When::Always, G::Q5_K}, {When::Always, G::Q5_K}, {When::Always, G::Q5_K}},
    {"q4_k_s", G::Q4_K, 14, true, {When::Below4, G::Q5_K}, {When::BelowN8, G::Q5_K}, {}, {When::Always, G::Q5_K}},
    {"q4_k_m", G::Q4_K, 15, true, {When::MoreBits, G::Q6_K}, {When::MoreBits, G::Q6_K}, {}, {When::Always, G::Q5_K}},
    {"q5_k_s", G::Q5_K, 16, true},
    {"q5_k_m", G::Q5_K, 17, true, {When::MoreBits, G::Q6_K}, {When::MoreBits, G::Q6_K}},
    {"q6_k_mix", G::Q6_K, 18, true},
    {"mxfp4_moe", G::MXFP4, 38, true, {}, {}, {}, {}, true},
    {"iq4_xs_mix",
     G::IQ4_XS,
     30,
     true,
     {When::Gqa4, G::Q5_K},
     {When::BelowN8NoImatrix, G::Q5_K},
     {},
     {When::Always, G::Q5_K}},
};

// llama.cpp's tensor_type_fallback (src/llama-quant.cpp) for a weight whose rows a 256-element
// super-block does not divide: Q2_K, Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
// IQ4_XS -> IQ4_NL (the same for --pure and for --tensor-type). Other types have no fallback.
std::optional<GgmlType> kquant_fallback(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: return GgmlType::Q4_0;
    case GgmlType::Q4_K: return GgmlType::Q5_0;
    case GgmlType::Q5_K: return GgmlType::Q5_1;
    case GgmlType::Q6_K: return GgmlType::Q8_0;
    case GgmlType::IQ4_XS: return GgmlType::IQ4_NL;
    default: return std::nullopt;
  }
}

const TypeRow* find_type_row(const std::string& name) {
  for (auto& r : kTypes)
    if (name == r.name) return &r;
  return nullptr;
}

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

GgmlType apply(const Rule& r, int i, int n, bool gqa4, bool imatrix, GgmlType base) {
  bool hit = false;
  switch (r.when) {
    case When::Never: return base;
    case When::Always: hit = true; break;
    case When::MoreBits: hit = use_more_bits(i, n); break;
    case When::Below2: hit = i < 2; break;
    case When::Below4: hit = i < 4; break;
    case When::BelowN16: hit = i < n / 16; break;
    case When::BelowN8: hit = i < n / 8; break;
    case When::Gqa4: hit = gqa4; break;
    case When::BelowN8NoImatrix: hit = !imatrix && i < n / 8; break;
  }
  const GgmlType t = hit ? r.then : r.otherwise;
  return t == kBase ? base : t;
}

// A mix's decisions in tensor order, with llama.cpp's counters.
struct MixState {
  const TypeRow& row;
  int n_attn_v, n_layers, n_experts;
  bool tied, gqa4, imatrix;
  int i_attn_v = 0, i_ffn_down = 0;

  GgmlType type(const std::string& gguf, int64_t cols, bool stacked) {
    const GgmlType base = row.type;
    if (row.mxfp4_moe) return stacked && n_experts > 1 ? GgmlType::MXFP4 : GgmlType::Q8_0;
    const bool x8 = n_experts == 8;
    if (gguf == "output.weight" || (tied && gguf == "token_embd.weight")) {
      if (cols % ggml_type_row(uint32_t(base))->block_size != 0) return GgmlType::Q8_0;
      return base == GgmlType::Q8_0 ? base : GgmlType::Q6_K;
    }
    if (is_attn_v(gguf)) {
      const GgmlType t = apply(row.attn_v, i_attn_v++, n_attn_v, gqa4, imatrix, base);
      return x8 ? GgmlType::Q8_0 : t;
    }
    if (x8 && gguf.find("attn_k.weight") != std::string::npos) return GgmlType::Q8_0;
    if (gguf.find("ffn_down") != std::string::npos) {
      const int i = n_experts > 1 ? std::stoi(gguf.substr(4)) : i_ffn_down;  // "blk.N."
      ++i_ffn_down;
      return apply(row.ffn_down, i, n_layers, gqa4, imatrix, base);
    }
    if (gguf.find("attn_output.weight") != std::string::npos)
      return apply(x8 ? row.attn_output_8x : row.attn_output, 0, 0, gqa4, imatrix, base);
    return base;
  }
  // llama.cpp's category_is_attn_v over tensor_get_category's name tests.
  static bool is_attn_v(const std::string& g) {
    return g.find("attn_qkv.weight") != std::string::npos || g.find("attn_kv_b.weight") != std::string::npos ||
           g.find("attn_v.weight") != std::string::npos;
  }
};

// Natural tensor order: token_embd, rope_freqs, layers 0..N in llama.cpp's per-layer order,
// output_norm, output.
std::pair<int, int> gguf_order_key(const std::string& gguf) {
  static const char* kLayer[] = {"attn_norm.weight",     "attn_q.weight",      "attn_q.bias",
                                 "attn_k.weight",        "attn_k.bias",        "attn_v.weight",
                                 "attn_v.bias",          "attn_q_norm.weight", "attn_k_norm.weight",
                                 "attn_output.weight",   "ffn_norm.weight",    "ffn_gate.weight",
                                 "ffn_up.weight",        "ffn_down.weight",    "ffn_gate_inp.weight",
                                 "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
                                 "attn_output.bias",     "attn_sinks.weight",  "post_attention_norm.weight",
                                 "ffn_gate_inp.bias",    "ffn_gate_exps.bias", "ffn_up_exps.bias",
                                 "ffn_down_exps.bias"};
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
  GgufTokenizerMeta t = tokenizer_to_gguf(*ck.tokenizer, {ck.config.vocab, ck.config.desc().gguf_arch});
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
  if (t.write_add_bos) w->add_bool("tokenizer.ggml.add_bos_token", t.add_bos);
  if (t.write_add_eos) w->add_bool("tokenizer.ggml.add_eos_token", t.add_eos);
  if (t.add_sep >= 0) w->add_bool("tokenizer.ggml.add_sep_token", t.add_sep == 1);
  if (t.add_space_prefix >= 0) w->add_bool("tokenizer.ggml.add_space_prefix", t.add_space_prefix == 1);
  if (!t.chat_template.empty()) w->add_string("tokenizer.chat_template", t.chat_template);
}

}  // namespace

std::string gguf_export_type_names() {
  std::string s;
  for (auto& r : kTypes) s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s;
}

std::optional<GgmlType> gguf_export_type(const std::string& name) {
  const TypeRow* r = find_type_row(name);
  return r ? std::optional<GgmlType>(r->type) : std::nullopt;
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

// One weight (or one expert's slice) [rows, cols] into `dst`: with importances the weighted search,
// where llama.cpp's own bytes are wanted its rule (IQ4_XS's IQ4_NL fallback), else the reference.
void quantize_weight(GgmlType type, const std::vector<float>& v, int64_t rows, int64_t cols, const float* imp,
                     bool llama_bytes, uint8_t* dst) {
  if (imp)
    ggml_quantize_weighted(type, v.data(), rows, cols, imp, dst);
  else if (llama_bytes)
    ggml_quantize_llama(type, v.data(), v.size(), dst);
  else
    ggml_quantize(type, v.data(), v.size(), dst);
}

// types_only: stop once every tensor's type is known and report them there, writing nothing.
void write_gguf(const Checkpoint& ck, const std::string& path, const GgufExportOptions& opt,
                std::map<std::string, GgmlType>* types_only) {
  const ModelConfig& c = ck.config;
  const char* arch = c.desc().gguf_arch;  // llama.cpp's general.architecture (mistral's is "llama")
  if (!*arch)
    user_error(
        "{}: architecture '{}' cannot be exported to GGUF (supported: llama, mistral, qwen2, qwen3, gemma2, "
        "gemma3_text, phi3, qwen3_moe, mixtral, gpt_oss)",
        ck.path, c.arch);
  const TypeRow* trp = find_type_row(opt.gguf_type);
  if (!trp) user_error("--gguf-type: unknown type '{}' ({})", opt.gguf_type, gguf_export_type_names());
  const TypeRow& tr = *trp;
  const GgmlTypeRow& block = *ggml_type_row(uint32_t(tr.type));
  if (!opt.tensor_types.empty() && block.block_size == 1)
    user_error("--tensor-type: needs a quantized --gguf-type (llama-quantize applies it to quantized files only)");

  // Every tensor's name, type and transform first: a bad shape is refused before writing.
  struct Item {
    std::string gguf, hf;
    GgmlType type;
    int permute_heads;
    bool llama_bytes = false;        // IQ4_NL written by llama.cpp's rule (IQ4_XS's fallback)
    std::vector<std::string> parts;  // a stacked expert tensor: its experts' HF names (hf empty)
    std::vector<int64_t> shape;      // HF order; a stacked one [n_experts, rows, cols]
  };
  // llama.cpp's expert router stays F32, 2-D as it is (llama-quantize never quantizes it).
  auto is_router = [](const std::string& g) { return g.find("ffn_gate_inp.weight") != std::string::npos; };
  // Not a weight a type or mix applies to: 1-D tensors, the router, gpt-oss's stacked expert biases.
  auto is_plain = [&](const auto& it) {
    return it.shape.size() < 2 || is_router(it.gguf) || (!it.parts.empty() && it.shape.size() == 2);
  };
  // A released gpt_oss folder (experts MXFP4): its blocks, for the experts written as MXFP4.
  const std::shared_ptr<const SafetensorsDir> mxfp4_src = gpt_oss_mxfp4_source(ck);
  // A GGUF source's stacked experts already MXFP4: copied where the output keeps them MXFP4, as
  // llama-quantize copies a tensor already of its type (requantizing gives the same values, not
  // always the same bytes: a block whose largest code is 3 can also be written one exponent lower).
  std::shared_ptr<const GgufFile> gguf_src;
  if (ck.source_kind == "gguf" && c.is_moe()) gguf_src = std::make_shared<const GgufFile>(GgufFile::open(ck.path));
  auto gguf_mxfp4 = [&](const std::string& g, const std::vector<int64_t>& shape) -> const GgufTensorInfo* {
    const GgufTensorInfo* t = gguf_src ? gguf_src->find_tensor(g) : nullptr;
    const std::vector<int64_t> ne(shape.rbegin(), shape.rend());
    return t && t->type == GgmlType::MXFP4 && t->ne == ne ? t : nullptr;
  };
  std::vector<Item> items;
  const bool tied = c.tie_word_embeddings || !ck.tensors.count("lm_head.weight");
  // Phi-3: q/k/v and gate/up written fused, as attn_qkv and ffn_up (Phi3MiniModel keeps HF's fused
  // tensors); the parts are concatenated when their turn comes.
  std::map<std::string, Tensor> fused;
  if (c.desc().fused_proj) fused = ck.tensors, fuse_projections(c, fused);
  const std::map<std::string, Tensor>& tensors = c.desc().fused_proj ? fused : ck.tensors;
  std::map<std::string, bool> stacked;  // stacked expert tensors already listed
  for (auto& [hf, t] : tensors) {
    if (hf == "lm_head.weight" && c.tie_word_embeddings) continue;
    const std::string g = hf_to_gguf_name(hf, c.desc());
    if (g.empty()) user_error("{}: tensor {} has no GGUF name", ck.path, hf);
    if (!is_float(t.dtype)) user_error("{}: tensor {} is {}, not a float tensor", ck.path, hf, dtype_name(t.dtype));
    if (std::vector<std::string> parts = gguf_expert_parts(g, c); !parts.empty()) {
      if (stacked[g]) continue;  // every expert's shape is the same (checked at load)
      stacked[g] = true;
      // gpt-oss's expert biases: stacked [n_experts, rows], F32 as every bias
      Item it{g, "", t.shape.size() == 1 ? GgmlType::F32 : tr.type, 0, false, {}, {}};
      it.shape = {int64_t(parts.size())};
      it.shape.insert(it.shape.end(), t.shape.begin(), t.shape.end());
      it.parts = std::move(parts);
      items.push_back(std::move(it));
      continue;
    }
    Item it{g, hf, t.shape.size() == 1 || is_router(g) ? GgmlType::F32 : tr.type, 0, false, {}, {}};
    it.shape = t.shape;
    if (c.gguf_permutes_qk() && hf.find(".self_attn.q_proj.") != std::string::npos) it.permute_heads = c.n_heads;
    if (c.gguf_permutes_qk() && hf.find(".self_attn.k_proj.") != std::string::npos) it.permute_heads = c.n_kv_heads;
    items.push_back(it);
  }
  if (c.rope_scaling.type == "llama3") items.push_back({"rope_freqs.weight", "", GgmlType::F32, 0, false, {}, {}});
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return gguf_order_key(a.gguf) < gguf_order_key(b.gguf); });

  // Each 2-D weight's type, in file order as llama-quantize decides them (llama_tensor_get_type):
  // the first --tensor-type pattern found in the name, else the mix's rule (plain types: the
  // type itself), then the fallback of a 256-block type whose rows 256 does not divide.
  std::map<std::string, int> fallbacks;  // "Q5_0 (... for Q4_K)" -> how many weights
  std::map<std::string, int> chosen;     // type -> how many weights (a mix or overrides)
  int n_attn_v = 0, overridden = 0;
  for (const Item& it : items) n_attn_v += MixState::is_attn_v(it.gguf);
  MixState mix{tr,
               n_attn_v,
               c.n_layers,
               c.n_experts,
               tied,
               c.n_kv_heads > 0 && c.n_heads / c.n_kv_heads >= 4,
               bool(opt.importance)};
  for (Item& it : items) {
    if (is_plain(it)) continue;
    const int64_t cols = it.shape.back();
    bool manual = false;
    for (const GgufTypeOverride& o : opt.tensor_types)
      if (std::regex_search(it.gguf, o.regex)) {
        it.type = o.type, manual = true, ++overridden;
        break;
      }
    if (!manual && tr.mix) it.type = mix.type(it.gguf, cols, !it.parts.empty());
    // A released gpt_oss folder's MXFP4 experts: kept MXFP4 under a float type, as llama.cpp's
    // converter keeps them (and then calls the file MOSTLY_MXFP4_MOE).
    if (!manual && mxfp4_src && !it.parts.empty() && block.block_size == 1) it.type = GgmlType::MXFP4;
    if (cols % ggml_type_row(uint32_t(it.type))->block_size != 0 && kquant_fallback(it.type)) {
      const GgmlType want = it.type;
      it.type = *kquant_fallback(want);
      it.llama_bytes = it.type == GgmlType::IQ4_NL;
      ++fallbacks[std::string(ggml_type_row(uint32_t(it.type))->name) + " (llama-quantize's fallback for " +
                  ggml_type_row(uint32_t(want))->name + ")"];
    }
    ++chosen[ggml_type_row(uint32_t(it.type))->name];
    if (cols % ggml_type_row(uint32_t(it.type))->block_size != 0)
      user_error(
          "{}: tensor {} {} has rows of {} elements, not a multiple of {}'s block of {} (llama-quantize "
          "would store it as f16; convert it with --gguf-type f16 or f32)",
          ck.path, it.hf, it.gguf, cols, ggml_type_row(uint32_t(it.type))->name,
          ggml_type_row(uint32_t(it.type))->block_size);
  }
  if (types_only) {
    for (const Item& it : items) {
      if (is_plain(it)) continue;
      if (it.parts.empty()) (*types_only)[it.hf] = it.type;
      for (const std::string& p : it.parts) (*types_only)[p] = it.type;
    }
    return;
  }
  for (auto& [name, n] : fallbacks)
    std::printf("%d weights with rows not a multiple of 256 stored as %s\n", n, name.c_str());
  if (tr.mix || overridden) {
    std::string m;
    for (auto& [name, n] : chosen) m += (m.empty() ? "" : ", ") + std::to_string(n) + " " + name;
    const std::string what = tr.mix ? "llama.cpp's " + std::string(tr.name) + " mix" : std::string(tr.name);
    const std::string by = overridden ? " (" + std::to_string(overridden) + " set by --tensor-type)" : "";
    std::printf("%s%s: %s\n", what.c_str(), by.c_str(), m.c_str());
  }

  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", opt.name);
  const bool mxfp4_kept = mxfp4_src && block.block_size == 1;
  write_gguf_arch_keys(c, mxfp4_kept ? 38u : tr.ftype, ck.path, &w);       // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
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
    if (!it.parts.empty()) {  // each expert quantized in turn into its slice of the stacked tensor
      // An expert's slice as the whole-tensor path makes it: GPTQ's blocks, else the weighted
      // quantizer with that expert's own importances (llama-quantize also gives each expert its
      // slice of the imatrix: src/llama-quant.cpp llama_tensor_quantize_impl), else the reference.
      struct Part {
        Tensor t;
        const std::vector<uint8_t>* pre;
        const float* imp;
      };
      std::vector<Part> parts;
      const int64_t rows = it.shape[1], cols = it.shape.size() == 3 ? it.shape[2] : 1;
      const size_t n = size_t(rows * cols), bytes = ggml_nbytes(it.type, n);
      // The source's own MXFP4 blocks, repacked (conversion/gpt_oss.py repack_mxfp4: no requantization).
      const bool copy = mxfp4_src && it.type == GgmlType::MXFP4;
      if (const GgufTensorInfo* src = it.type == GgmlType::MXFP4 ? gguf_mxfp4(it.gguf, it.shape) : nullptr) {
        w.add_tensor(it.gguf, src->ne, it.type,
                     [gguf_src, src] { return std::vector<uint8_t>(src->data, src->data + src->nbytes); });
        continue;
      }
      for (const std::string& p : it.parts) {
        Part q{tensors.at(p), opt.packed && !copy ? opt.packed(p) : nullptr, nullptr};
        if (q.pre && q.pre->size() != bytes)
          throw std::logic_error("gguf export: precomputed blocks of " + p + " have the wrong size");
        if (!q.pre && !copy && opt.importance && ggml_type_row(uint32_t(it.type))->block_size > 1)
          q.imp = opt.importance(p, cols);
        weighted += q.imp != nullptr;
        parts.push_back(q);
      }
      auto stacked_bytes = [parts, it, n, bytes, rows, cols, copy, mxfp4_src, &c] {
        std::vector<uint8_t> out(bytes * parts.size());
        for (size_t e = 0; e < parts.size(); ++e) {
          uint8_t* dst = out.data() + e * bytes;
          if (parts[e].pre) {
            std::memcpy(dst, parts[e].pre->data(), bytes);
            continue;
          }
          if (copy) {
            const std::vector<uint8_t> b = gpt_oss_mxfp4_ggml_blocks(*mxfp4_src, c, it.parts[e]);
            if (b.size() != bytes) throw std::logic_error("gguf export: MXFP4 blocks of " + it.parts[e]);
            std::memcpy(dst, b.data(), bytes);
            continue;
          }
          Tensor src = materialize(parts[e].t);
          const std::vector<float> v = to_f32(src);
          release_pages(src);
          quantize_weight(it.type, v, rows, cols, parts[e].imp, it.llama_bytes, dst);
        }
        return out;
      };
      w.add_tensor(it.gguf, std::vector<int64_t>(it.shape.rbegin(), it.shape.rend()), it.type, stacked_bytes);
      continue;
    }
    const Tensor& t = tensors.at(it.hf);
    // Gemma's RMSNorm weights are stored as 1 + w, in float32 (GemmaModel.modify_tensors).
    const bool plus_one =
        c.desc().norm_plus_one && it.hf.size() > 11 && it.hf.compare(it.hf.size() - 11, 11, "norm.weight") == 0;
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    const std::vector<uint8_t>* pre = opt.packed && t.shape.size() == 2 ? opt.packed(it.hf) : nullptr;
    const float* imp = nullptr;
    if (!pre && opt.importance && t.shape.size() == 2 &&
        ggml_type_row(uint32_t(it.type))->block_size > 1) {  // not the F32 router
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
      quantize_weight(it.type, v, t.shape[0], t.shape.size() == 2 ? t.shape[1] : 1, imp, it.llama_bytes, out.data());
      return out;
    });
  }
  w.write(path);
  if (opt.importance) std::printf("imatrix: %d weights quantized with importance weights\n", weighted);
}

}  // namespace

}  // namespace qt
