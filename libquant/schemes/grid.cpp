// SchemeGrid: a row's GridRule (its RTN rule, rounding and packing as separate steps; grid.h).
// The rule's functions live beside each row's quantize and share its rounding, so this file only
// walks groups and stores parameters.
#include "libquant/schemes/grid.h"

#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "formats/error.h"
#include "libquant/schemes/detail.h"

namespace qt {

using namespace schemes_detail;

SchemeGrid::SchemeGrid(const SchemeParams& p) : p_(p), row_(&find_scheme(p.scheme)), rule_(&row_->grid) {
  if (!rule_->code) user_error("--scheme {}: no calibrated quantizer for this scheme", p.scheme);
  qmin_ = rule_->qmin;
  qmax_ = rule_->kind == GridKind::Affine ? (1 << p.bits) - 1 : rule_->qmax;
  // The dtypes the layout stores parameters in (a shape every group size divides).
  const PackedLayout l = row_->layout(p, 1, 256);
  scale_dtype_ = l.scales.dtype;
  if (l.biases) bias_dtype_ = l.biases->dtype;
}

int64_t SchemeGrid::group_len(int64_t cols) const { return p_.group_size == 0 ? cols : p_.group_size; }

bool SchemeGrid::fits(int64_t rows, int64_t cols, std::string* why) const {
  if (!scheme_fits(p_, rows, cols, why)) return false;
  if (row_->block_rows > 1) {
    if (why)
      *why = fmt::format("{}'s scales cover blocks of {} rows, not groups of one row", row_->name, row_->block_rows);
    return false;
  }
  if (row_->flat_blocks && cols % p_.group_size != 0) {
    if (why) *why = "a block would span two rows (the block size does not divide the row)";
    return false;
  }
  return true;
}

SchemeGrid SchemeGrid::for_weight(const float* w, int64_t rows, int64_t cols) const {
  SchemeGrid g = *this;
  if (row_->tensor_scale && p_.global_scale <= 0.0f) g.p_.global_scale = row_->tensor_scale(w, rows * cols, p_);
  return g;
}

GroupParams SchemeGrid::stored(const GroupParams& g) const {
  if (rule_->store) return rule_->store(g, p_);
  return {round_to(scale_dtype_, g.scale), rule_->kind == GridKind::Affine ? round_to(bias_dtype_, g.bias) : 0.0f};
}

PackedTensor SchemeGrid::pack(const int16_t* codes, const GroupParams* params, int64_t rows, int64_t cols) const {
  std::string why;
  if (!fits(rows, cols, &why)) user_error("[{}, {}]: {}", rows, cols, why);
  const PackedLayout l = packed_layout(p_, rows, cols);
  OutTensor data(l.data), scales(l.scales);
  std::optional<OutTensor> biases;
  if (l.biases) biases.emplace(*l.biases);
  const int64_t gl = group_len(cols), ng = cols / gl;
  // Every layout stores a row's codes as a whole number of bytes (flat blocks: when they divide
  // the row, which fits() checked).
  const size_t row_bytes = l.data.nbytes() / size_t(rows);
  uint8_t* out = data.as<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < ng; ++g) {
      if (rule_->scale_byte) {  // E4M3 / E8M0 scales; a tensor-level scale as the biases
        scales.as<uint8_t>()[r * ng + g] = rule_->scale_byte(params[r * ng + g], p_);
        continue;
      }
      scales.store_float(size_t(r * ng + g), params[r * ng + g].scale);
      if (biases) biases->store_float(size_t(r * ng + g), params[r * ng + g].bias);
    }
    rule_->pack_row(codes + r * cols, cols, p_, out + size_t(r) * row_bytes);
  }
  if (rule_->scale_byte && biases) {
    if (p_.global_scale <= 0.0f) throw std::logic_error("SchemeGrid::pack: the grid was not bound to its weight");
    biases->as<float>()[0] = p_.global_scale;
  }
  SchemeParams kept = p_;
  kept.global_scale = 0.0f;  // the packed tensor stores it
  return finish_packed(kept, rows, cols, data, scales, biases ? &*biases : nullptr);
}

}  // namespace qt
