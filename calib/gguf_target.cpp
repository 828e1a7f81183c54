#include "calib/gguf_target.h"

#include <algorithm>

#include "formats/ggml_quantize.h"

namespace qt::calib {

namespace {

// Candidates in a fixed order, the 32-element types first, so that index k is the same type for
// every weight with rows of a multiple of 32 (type_choice's uniform plans compare like for like).
constexpr GgmlType kTargetTypes[] = {GgmlType::Q4_0,   GgmlType::IQ4_NL, GgmlType::Q4_1, GgmlType::Q5_0,
                                     GgmlType::Q5_1,   GgmlType::Q8_0,   GgmlType::Q2_K, GgmlType::Q3_K,
                                     GgmlType::IQ4_XS, GgmlType::Q4_K,   GgmlType::Q5_K, GgmlType::Q6_K};
constexpr GgmlType kProbeType = GgmlType::Q4_0;

// w quantized to `type` as the GGUF export does (importance-weighted when imp is given), back
// to fp32.
std::vector<float> round_trip(GgmlType type, const std::vector<float>& w, int64_t rows, int64_t cols,
                              const float* imp) {
  std::vector<uint8_t> q(ggml_nbytes(type, size_t(rows * cols)));
  if (imp)
    ggml_quantize_weighted(type, w.data(), rows, cols, imp, q.data());
  else
    ggml_quantize(type, w.data(), w.size(), q.data());
  const GgmlTypeRow& row = *ggml_type_row(uint32_t(type));
  std::vector<float> out(w.size());
  ggml_dequantize(row, q.data(), out.data(), w.size() / size_t(row.block_size));
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  return s;
}

}  // namespace

TargetCandidates gguf_target_candidates(const Checkpoint& ck) {
  TargetCandidates c;
  for (GgmlType t : kTargetTypes) c.names.push_back(ggml_type_row(uint32_t(t))->name);
  c.probes = {ggml_type_row(uint32_t(kProbeType))->name};
  c.fits = [](size_t k, int64_t, int64_t cols) {
    return cols % ggml_type_row(uint32_t(kTargetTypes[k]))->block_size == 0;
  };
  c.round_trip = [](size_t k, const std::string&, const std::vector<float>& w, int64_t rows, int64_t cols,
                    const float* imp, uint64_t* bytes) {
    *bytes = ggml_nbytes(kTargetTypes[k], size_t(rows * cols));
    return round_trip(kTargetTypes[k], w, rows, cols, imp);
  };
  c.label = [desc = &ck.config.desc()](const std::string& hf) { return hf_to_gguf_name(hf, *desc); };
  return c;
}

std::vector<std::string> gguf_target_recipe(const TargetPlan& plan) {
  std::vector<std::string> out;
  for (const TargetWeight& w : plan.weights) {
    std::string re = "^";
    for (char ch : w.label) re += ch == '.' ? std::string("\\.") : std::string(1, ch);
    out.push_back(re + "$=" + lower(w.cands[size_t(w.pick)]));
  }
  return out;
}

std::string gguf_target_main_type(const TargetPlan& plan) { return lower(target_main_candidate(plan)); }

}  // namespace qt::calib
