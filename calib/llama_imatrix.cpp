#include "calib/llama_imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "calib/expert_prior.h"
#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/mapped_file.h"

namespace qt::calib {

namespace {

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// "blk.N.<rest>" -> ("model.layers.N.", rest); false otherwise.
bool imatrix_split_blk(const std::string& g, std::string* hf_prefix, std::string* rest) {
  if (g.rfind("blk.", 0) != 0) return false;
  const size_t dot = g.find('.', 4);
  if (dot == std::string::npos || dot == 4) return false;
  for (size_t i = 4; i < dot; ++i)
    if (g[i] < '0' || g[i] > '9') return false;
  *hf_prefix = "model.layers." + g.substr(4, dot - 4) + ".";
  *rest = g.substr(dot + 1);
  return true;
}

// The HF weights a llama.cpp imatrix entry stands for (empty: none we know).
std::vector<std::string> imatrix_hf_names(const std::string& g) {
  if (g == "output.weight" || g == "token_embd.weight") return {"lm_head.weight"};
  std::string p, rest;
  if (imatrix_split_blk(g, &p, &rest) && rest == "attn_qkv.weight")
    return {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"};
  const std::string hf = gguf_to_hf_name(g);
  if (hf.empty()) return {};
  return {hf};
}

// Phi-3's fused gate_up is stored as ffn_up with no ffn_gate: gate_proj reads the same input.
void imatrix_fill_gate(ActStats* s) {
  std::vector<std::pair<std::string, ChannelStats>> add;
  for (auto& [name, c] : s->linears)
    if (ends_with(name, ".mlp.up_proj.weight")) {
      const std::string gate = name.substr(0, name.size() - 19) + ".mlp.gate_proj.weight";
      if (!s->linears.count(gate)) add.emplace_back(gate, c);
    }
  for (auto& [n, c] : add) s->linears[n] = c;
}

void imatrix_add(ActStats* s, const std::string& g, std::vector<float> sqmean, std::set<std::string>* skipped) {
  const std::vector<std::string> hf = imatrix_hf_names(g);
  if (hf.empty()) {
    skipped->insert(g);
    return;
  }
  for (const std::string& n : hf) s->linears[n].sqmean = sqmean;
}

void imatrix_warn_skipped(const std::string& path, const std::set<std::string>& skipped) {
  if (skipped.empty()) return;
  std::fprintf(stderr, "warning: %s: %zu entries with no quanttool weight ignored (%s%s)\n", path.c_str(),
               skipped.size(), skipped.begin()->c_str(), skipped.size() > 1 ? ", ..." : "");
}

// The metadata key our GGUF imatrix files carry for a mixture of experts: the experts' counts
// (and sums) include calib/expert_prior.h's prior, this many tokens of the layer's expert average.
constexpr const char* kPriorKey = "quanttool.expert_prior_tokens";

// Entries whose weight is named by the model's mixture-of-experts row, not by the fixed table:
// the merged experts and the router ("blk.N.ffn_gate_inp.weight").
bool is_expert_entry(const std::string& g) {
  return ends_with(g, "_exps.weight") || ends_with(g, ".ffn_gate_inp.weight");
}

// A merged-expert entry's per-expert importances into s->expert_slices. llama-quantize divides
// each expert's sums by its count and gives an expert with none an importance of 1 (tools/quantize/
// quantize.cpp load_imatrix) — what llama.cpp users meet for experts the text never reached. We
// add the prior of calib/expert_prior.h instead (kExpertPriorTokens tokens of the entry's expert
// average), as act-stats does, unless the file is ours and its counts hold the prior already.
// Returns the experts with fewer than kExpertPriorTokens tokens.
int imatrix_expert_slices(ActStats* s, const std::string& name, const std::vector<float>& sums,
                          const std::vector<float>& counts, bool prior_in_file) {
  const size_t nmat = counts.size(), cols = sums.size() / nmat;
  std::vector<std::vector<double>> d(nmat);
  std::vector<std::vector<double>*> ptr;
  std::vector<int64_t> tokens;
  for (size_t e = 0; e < nmat; ++e) {
    d[e].assign(sums.begin() + long(e * cols), sums.begin() + long((e + 1) * cols));
    ptr.push_back(&d[e]);
    tokens.push_back(std::lround(counts[e]) - (prior_in_file ? kExpertPriorTokens : 0));
  }
  int few = 0;
  if (!prior_in_file) few = add_expert_prior(ptr, tokens);
  std::vector<ChannelStats>& out = s->expert_slices[name];
  out.assign(nmat, ChannelStats{});
  const bool none = std::accumulate(tokens.begin(), tokens.end(), int64_t(0)) + int64_t(prior_in_file) == 0;
  for (size_t e = 0; e < nmat; ++e) {
    out[e].sqmean.resize(cols);
    // Our own file: llama-quantize's float quotient (what the writer made exact); else with the prior.
    const double n = double(tokens[e] + kExpertPriorTokens);
    for (size_t j = 0; j < cols; ++j)
      out[e].sqmean[j] = none ? 1.0f : prior_in_file ? sums[e * cols + j] / counts[e] : float(d[e][j] / n);
    out[e].tokens = std::max<int64_t>(tokens[e], 0);
    s->tokens = std::max(s->tokens, out[e].tokens);
  }
  return few;
}

ActStats load_imatrix_gguf(const std::string& path) {
  const GgufFile g = GgufFile::open(path);
  ActStats s;
  std::set<std::string> skipped;
  int n = 0;
  // Written by save_llama_imatrix_gguf: the experts' counts include the prior's tokens.
  const bool prior_in_file = g.has(kPriorKey);
  for (const GgufTensorInfo& t : g.tensors()) {
    if (!ends_with(t.name, ".in_sum2")) continue;
    const std::string name = t.name.substr(0, t.name.size() - 8);
    const GgufTensorInfo* c = g.find_tensor(name + ".counts");
    if (!c) user_error("{}: {} has no {}.counts", path, t.name, name);
    if (t.type != GgmlType::F32 || c->type != GgmlType::F32)
      user_error("{}: {}: sums and counts must be F32", path, name);
    const int64_t nval = t.numel(), nmat = c->numel();
    if (nmat < 1 || nval % nmat != 0) user_error("{}: {}: {} sums for {} counts", path, name, nval, nmat);
    ++n;
    std::vector<float> sums(static_cast<size_t>(nval)), counts(static_cast<size_t>(nmat));
    std::memcpy(sums.data(), t.data, sums.size() * 4);
    std::memcpy(counts.data(), c->data, counts.size() * 4);
    if (nmat > 1 || ends_with(name, "_exps.weight")) {  // a merged-expert weight: per-expert sums and counts
      const int few = imatrix_expert_slices(&s, name, sums, counts, prior_in_file);
      if (!ends_with(name, "ffn_up_exps.weight")) s.experts_with_few_tokens += few;  // up reads gate's input
      continue;
    }
    // common/imatrix-loader.cpp rounds the count; llama-quantize divides in float, 1 when no data.
    const float count = float(std::lround(counts[0]));
    std::vector<float> m(static_cast<size_t>(nval));
    for (int64_t j = 0; j < nval; ++j) m[size_t(j)] = count > 0 ? sums[size_t(j)] / count : 1.0f;
    s.tokens = std::max<int64_t>(s.tokens, std::lround(counts[0]));
    if (is_expert_entry(name)) {  // a router: named once the model is known
      s.expert_slices[name] = {ChannelStats{{}, std::move(m), std::lround(counts[0])}};
      continue;
    }
    imatrix_add(&s, name, std::move(m), &skipped);
  }
  if (n == 0) user_error("{}: a GGUF file without imatrix data (no .in_sum2 tensors)", path);
  if (g.has("imatrix.datasets") && g.metadata().at("imatrix.datasets").type == GgufValueType::ARRAY &&
      g.metadata().at("imatrix.datasets").elem_type == GgufValueType::STRING) {
    const auto& d = g.get_string_array("imatrix.datasets");
    if (!d.empty()) s.text = d.back();
  }
  imatrix_warn_skipped(path, skipped);
  return s;
}

// Bounds-checked reads from the mapped .dat.
struct DatReader {
  const MappedFile& f;
  const std::string& path;
  size_t pos = 0;
  bool can(size_t n) const { return f.size - pos >= n; }
  void need(size_t n, const char* what) const {
    if (!can(n)) user_error("{}: not a llama.cpp imatrix: the file ends inside {}", path, what);
  }
  int32_t i32(const char* what) {
    need(4, what);
    int32_t v;
    std::memcpy(&v, f.data + pos, 4);
    pos += 4;
    return v;
  }
};

ActStats load_imatrix_dat(const std::string& path) {
  const MappedFile f = map_file(path);
  DatReader r{f, path};
  const int32_t n_entries = r.i32("the entry count");
  if (n_entries < 1 || int64_t(n_entries) > int64_t(f.size / 12))
    user_error("{}: not an act-stats safetensors file, nor a llama.cpp imatrix (GGUF or .dat)", path);
  ActStats s;
  std::set<std::string> skipped;
  for (int32_t i = 0; i < n_entries; ++i) {
    const int32_t len = r.i32("an entry name");
    if (len < 1 || len > 4096) user_error("{}: not a llama.cpp imatrix: entry {} has a name of {} bytes", path, i, len);
    r.need(size_t(len), "an entry name");
    const std::string name(reinterpret_cast<const char*>(f.data + r.pos), size_t(len));
    r.pos += size_t(len);
    const int32_t ncall = r.i32("an entry");
    const int32_t nval = r.i32("an entry");
    if (nval < 1) user_error("{}: {}: {} values", path, name, nval);
    r.need(size_t(nval) * 4, "an entry's values");
    std::vector<float> v(static_cast<size_t>(nval));
    std::memcpy(v.data(), f.data + r.pos, v.size() * 4);
    r.pos += v.size() * 4;
    // llama-quantize (tools/quantize/quantize.cpp load_imatrix): value / ncall, as stored if ncall ≤ 0.
    if (ncall > 0)
      for (float& x : v) x = x / float(ncall);
    if (is_expert_entry(name)) {  // every expert's values in one row, split once the model is known
      s.expert_slices[name] = {ChannelStats{{}, std::move(v), 0}};
      continue;
    }
    imatrix_add(&s, name, std::move(v), &skipped);
  }
  if (r.can(8)) {  // chunk count, dataset name
    r.i32("the chunk count");
    const int32_t len = r.i32("the dataset name");
    if (len > 0 && r.can(size_t(len))) s.text.assign(reinterpret_cast<const char*>(f.data + r.pos), size_t(len));
  }
  imatrix_warn_skipped(path, skipped);
  return s;
}

// llama.cpp's name for our weight `hf` in model `c`; "" for one the fused entry already covers.
std::string imatrix_gguf_name(const std::string& hf, const ModelConfig& c) {
  if (hf == "lm_head.weight") return c.tie_word_embeddings ? "token_embd.weight" : "output.weight";
  // The model's own name first (a mixture of experts' experts: their merged weight), else the
  // fixed table's (Phi-3's parts, stored fused, handled below).
  std::string g = hf_to_gguf_name(hf, c.desc());
  if (g.empty()) g = hf_to_gguf_name(hf);
  if (g.empty()) user_error("act-stats: {} has no llama.cpp imatrix name", hf);
  if (c.desc().fused_proj) {  // Phi-3: attn_qkv and the gate_up stored as ffn_up
    std::string p, rest;
    imatrix_split_blk(g, &p, &rest);
    const std::string blk = g.substr(0, g.size() - rest.size());
    if (rest == "attn_q.weight") return blk + "attn_qkv.weight";
    if (rest == "attn_k.weight" || rest == "attn_v.weight" || rest == "ffn_up.weight") return "";
    if (rest == "ffn_gate.weight") return blk + "ffn_up.weight";
  }
  return g;
}

// The float p nearest sqmean · n with float(p) / float(n) == sqmean, searched a few ulps around the
// rounded product (the product itself when none is).
float imatrix_sum_for(float sqmean, int64_t n) {
  const float fn = float(n);
  const float p = float(double(sqmean) * double(n));
  if (p / fn == sqmean) return p;
  float lo = p, hi = p;
  for (int k = 0; k < 4; ++k) {
    lo = std::nextafter(lo, -INFINITY), hi = std::nextafter(hi, INFINITY);
    if (lo / fn == sqmean) return lo;
    if (hi / fn == sqmean) return hi;
  }
  return p;
}

// One entry of a llama.cpp imatrix: a weight's statistics, or a merged-expert weight's, one per
// expert in expert order, with the token count each is over.
struct ImatrixEntry {
  std::vector<const ChannelStats*> mats;
  std::vector<int64_t> counts;
  bool experts = false;
};

// Our weights under llama.cpp names, sorted (llama-imatrix's order), skipping fused duplicates; a
// mixture of experts' experts gathered into their merged weight ("blk.N.ffn_up_exps.weight"), each
// counted over its routed tokens plus the prior's (calib/expert_prior.h), so that llama-quantize's
// quotient is our importance.
std::map<std::string, ImatrixEntry> imatrix_entries(const ActStats& s, const ModelConfig& c) {
  std::map<std::string, ImatrixEntry> out;
  for (auto& [hf, st] : s.linears) {
    const std::string g = imatrix_gguf_name(hf, c);
    if (g.empty() || out.count(g)) continue;
    ImatrixEntry& e = out[g];
    const std::vector<std::string> parts = gguf_expert_parts(g, c);
    if (parts.empty()) {
      e.mats = {&st}, e.counts = {s.tokens};
      continue;
    }
    e.experts = true;
    for (const std::string& p : parts) {
      const ChannelStats* x = s.find(p, false);
      if (!x) user_error("act-stats: {} has no statistics for {} (every expert of {} is needed)", hf, p, g);
      e.mats.push_back(x), e.counts.push_back(x->tokens + kExpertPriorTokens);
    }
  }
  if (out.empty()) user_error("act-stats: no statistics to write");
  return out;
}

}  // namespace

bool looks_like_safetensors(const std::string& path) {
  const MappedFile f = map_file(path);
  return f.size >= 9 && f.data[8] == '{' && std::memcmp(f.data, "GGUF", 4) != 0;
}

ActStats load_llama_imatrix(const std::string& path) {
  const MappedFile f = map_file(path);
  ActStats s = f.size >= 4 && std::memcmp(f.data, "GGUF", 4) == 0 ? load_imatrix_gguf(path) : load_imatrix_dat(path);
  imatrix_fill_gate(&s);
  if (s.linears.empty() && s.expert_slices.empty()) user_error("{}: holds no statistics for a quanttool weight", path);
  return s;
}

void resolve_expert_slices(ActStats* s, const ModelConfig& c) {
  for (auto& [g, slices] : s->expert_slices) {
    const std::vector<std::string> parts = gguf_expert_parts(g, c);
    if (parts.empty() && slices.size() == 1 && c.is_moe() && ends_with(g, ".ffn_gate_inp.weight")) {
      s->linears[gguf_to_hf_name(g, c.desc())] = slices[0];  // a router
      continue;
    }
    if (parts.empty()) user_error("imatrix: {} is not a merged-expert weight of this {} model", g, c.arch);
    const size_t n = parts.size();
    std::vector<ChannelStats> per = slices;
    if (per.size() == 1 && n > 1) {  // a legacy .dat: one row of every expert's values
      const std::vector<float>& v = slices[0].sqmean;
      if (v.size() % n != 0) user_error("imatrix: {} holds {} values, not {} experts' worth", g, v.size(), n);
      per.assign(n, ChannelStats{});
      for (size_t e = 0; e < n; ++e)
        per[e].sqmean.assign(v.begin() + long(e * v.size() / n), v.begin() + long((e + 1) * v.size() / n));
    }
    if (per.size() != n) user_error("imatrix: {} has {} experts, the model {}", g, per.size(), n);
    for (size_t e = 0; e < n; ++e) s->linears[parts[e]] = per[e];
  }
  s->expert_slices.clear();
}

void save_llama_imatrix_gguf(const std::string& path, const ActStats& s, const ModelConfig& c, int chunk_size,
                             int chunks) {
  GgufWriter w;
  w.add_string("general.type", "imatrix");
  w.add_string_array("imatrix.datasets", {s.text});
  w.add_u32("imatrix.chunk_count", uint32_t(chunks));
  w.add_u32("imatrix.chunk_size", uint32_t(chunk_size));
  const auto entries = imatrix_entries(s, c);
  if (std::any_of(entries.begin(), entries.end(), [](auto& e) { return e.second.experts; }))
    w.add_u32(kPriorKey, uint32_t(kExpertPriorTokens));
  for (auto& [g, e] : entries) {
    const int64_t cols = int64_t(e.mats[0]->sqmean.size()), nmat = int64_t(e.mats.size());
    // [cols, n_mat] as llama-imatrix writes them; 1-D for one matrix (ggml_n_dims drops the 1).
    const std::vector<int64_t> shape = nmat > 1 ? std::vector<int64_t>{cols, nmat} : std::vector<int64_t>{cols};
    w.add_tensor(g + ".in_sum2", shape, GgmlType::F32, [&e, cols] {
      std::vector<uint8_t> b(size_t(cols) * e.mats.size() * 4);
      for (size_t m = 0; m < e.mats.size(); ++m)
        for (int64_t j = 0; j < cols; ++j) {
          const float v = imatrix_sum_for(e.mats[m]->sqmean[size_t(j)], e.counts[m]);
          std::memcpy(b.data() + 4 * (m * size_t(cols) + size_t(j)), &v, 4);
        }
      return b;
    });
    w.add_tensor(g + ".counts", nmat > 1 ? std::vector<int64_t>{1, nmat} : std::vector<int64_t>{1}, GgmlType::F32,
                 [&e] {
                   std::vector<uint8_t> b(e.counts.size() * 4);
                   for (size_t m = 0; m < e.counts.size(); ++m) {
                     const float v = float(e.counts[m]);
                     std::memcpy(b.data() + 4 * m, &v, 4);
                   }
                   return b;
                 });
  }
  w.write(path);
}

void save_llama_imatrix_dat(const std::string& path, const ActStats& s, const ModelConfig& c, int chunks) {
  std::string b;
  auto put = [&b](const void* p, size_t n) { b.append(reinterpret_cast<const char*>(p), n); };
  auto put_i32 = [&put](int32_t v) { put(&v, 4); };
  const auto entries = imatrix_entries(s, c);
  put_i32(int32_t(entries.size()));
  for (auto& [g, e] : entries) {
    put_i32(int32_t(g.size()));
    put(g.data(), g.size());
    put_i32(chunks);
    put_i32(int32_t(e.mats[0]->sqmean.size() * e.mats.size()));
    for (const ChannelStats* st : e.mats)  // a merged-expert weight: the experts one after another
      for (float m : st->sqmean) {
        const float v = imatrix_sum_for(m, chunks);
        put(&v, 4);
      }
  }
  put_i32(chunks);
  put_i32(int32_t(s.text.size()));
  put(s.text.data(), s.text.size());
  write_file_atomic(path, b.data(), b.size());
}

}  // namespace qt::calib
