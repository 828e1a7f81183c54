#include "calib/gptq_ggml.h"

#include <algorithm>
#include <cmath>

#include "formats/error.h"
#include "formats/ggml_quantize.h"

namespace qt::calib {

namespace {

// A ggml block type as GPTQ's grid. The value table of a row's current block (every code of every
// sub-block under the block's scale fields) is made by the type's own packer and dequantizer, so it
// is the file's value exactly; it is remade when the row's pass enters another block.
struct GgmlRounder : GptqRounder {
  GgmlType type;
  const GgmlTypeRow& row;
  GgmlCodeRange cr;
  int64_t bs, bytes, levels, nsub, cols, nb;
  const float* imp;  // per column, or null (the reference rule)
  std::vector<uint8_t> out, codes;
  std::vector<float> tab;    // per row: nsub × levels values of its current block
  std::vector<int64_t> cur;  // per row: the block `tab` holds, -1 none
  float* swept = nullptr;    // [rows, cols], or null

  GgmlRounder(GgmlType t, int64_t rows, int64_t c, const float* importance)
      : type(t),
        row(*ggml_type_row(uint32_t(t))),
        cr(ggml_code_range(t)),
        bs(row.block_size),
        bytes(row.type_size),
        levels(cr.hi - cr.lo + 1),
        nsub(bs / cr.sub),
        cols(c),
        nb(c / bs),
        imp(importance),
        out(size_t(rows * nb * bytes)),
        codes(size_t(rows * c)),
        tab(size_t(rows * nsub * levels)),
        cur(size_t(rows), -1) {}

  uint8_t* block(int64_t r, int64_t b) { return out.data() + (r * nb + b) * bytes; }

  void fit(int64_t r, int64_t col, const float* v) override {
    ggml_quantize_block(type, v, imp ? imp + col : nullptr, block(r, col / bs));
    cur[size_t(r)] = -1;
  }

  void make_table(int64_t r, int64_t b) {
    std::vector<uint8_t> blk(block(r, b), block(r, b) + bytes), L(static_cast<size_t>(bs));
    std::vector<float> v(static_cast<size_t>(bs));
    float* t = tab.data() + r * nsub * levels;
    for (int c = cr.lo; c <= cr.hi; ++c) {
      std::fill(L.begin(), L.end(), uint8_t(c));
      ggml_pack_codes(type, L.data(), blk.data());
      row.to_float(blk.data(), v.data(), 1);
      for (int64_t s = 0; s < nsub; ++s) t[s * levels + (c - cr.lo)] = v[size_t(s * cr.sub)];
    }
    cur[size_t(r)] = b;
  }

  float round(int64_t r, int64_t col, float x) override {
    const int64_t b = col / bs;
    if (cur[size_t(r)] != b) make_table(r, b);
    // The values rise (or fall, for a negative scale) with the code: bisect, then take the nearer
    // of the two neighbours.
    const float* v = tab.data() + (r * nsub + (col % bs) / cr.sub) * levels;
    const bool rising = v[levels - 1] >= v[0];
    int64_t lo = 0, hi = levels;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (rising ? v[mid] < x : v[mid] > x)
        lo = mid + 1;
      else
        hi = mid;
    }
    int64_t k = std::min(lo, levels - 1);
    if (lo > 0 && std::fabs(x - v[lo - 1]) <= std::fabs(x - v[k])) k = lo - 1;
    codes[size_t(r * cols + col)] = uint8_t(cr.lo + k);
    if (swept) swept[r * cols + col] = v[k];
    return v[k];
  }

  void pack(int64_t rows) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nb; ++b) ggml_pack_codes(type, codes.data() + r * cols + b * bs, block(r, b));
  }
};

}  // namespace

std::vector<uint8_t> gptq_quantize_ggml(GgmlType type, const float* w, int64_t rows, int64_t cols, const GptqHessian& h,
                                        const GptqOptions& opt, std::vector<float>* deq, double* loss,
                                        std::vector<float>* swept) {
  const GgmlTypeRow* row = ggml_type_row(uint32_t(type));
  if (!row || row->block_size <= 1 || !ggml_code_range(type).sub)
    user_error("gptq: no calibrated rounding for GGUF type {}", row ? row->name : "?");
  if (cols % row->block_size != 0)
    user_error("gptq: rows of {} elements, not a multiple of {}'s block of {}", cols, row->name, row->block_size);
  GgmlRounder rd(type, rows, cols, opt.weighted_groups ? h.diag.data() : nullptr);
  if (swept) swept->assign(size_t(rows * cols), 0.0f), rd.swept = swept->data();
  const double l = gptq_sweep(w, rows, cols, row->block_size, h, opt, rd);
  rd.pack(rows);
  if (loss) *loss = l;
  if (deq) {
    deq->resize(size_t(rows * cols));
    ggml_dequantize(*row, rd.out.data(), deq->data(), size_t(rows * rd.nb));
  }
  return std::move(rd.out);
}

std::map<std::string, std::vector<uint8_t>> gptq_gguf(const Checkpoint& ck,
                                                      const std::map<std::string, GgmlType>& types,
                                                      const std::vector<int32_t>& tokens, const SequentialOptions& so,
                                                      const GptqOptions& go) {
  const bool tied = ck.config.tie_word_embeddings || !ck.has("lm_head.weight");
  const std::string head = tied ? "model.embed_tokens.weight" : "lm_head.weight";
  std::set<std::string> targets;
  for (auto& [name, t] : types) {
    const GgmlTypeRow* row = ggml_type_row(uint32_t(t));
    if (row->block_size > 1 && (name.rfind("model.layers.", 0) == 0 || name == head)) targets.insert(name);
  }
  std::map<std::string, std::vector<uint8_t>> out;
  std::string prepared_site;  // the site's Hessian, prepared once for the projections sharing it
  GptqHessian prepared;
  run_sequential(ck, targets, tokens, so,
                 [&](const std::string& name, const std::vector<float>& w, int64_t rows, int64_t cols,
                     std::vector<float>& H, const std::string& site, bool need) {
                   if (site != prepared_site) {
                     prepared = GptqHessian();
                     prepared = prepare_gptq_hessian(std::move(H), cols, go), prepared_site = site;
                   }
                   std::vector<float> deq;
                   out[name] =
                       gptq_quantize_ggml(types.at(name), w.data(), rows, cols, prepared, go, need ? &deq : nullptr);
                   return deq;
                 });
  return out;
}

}  // namespace qt::calib
