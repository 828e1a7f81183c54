// The scheme table and what every row shares: parameter checks, layouts, sizes, and the
// quantize / dequantize entry points that validate before calling a row.
#include "libquant/schemes/scheme.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <numeric>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "formats/error.h"
#include "formats/tensor.h"
#include "libquant/schemes/detail.h"

namespace qt {

using namespace schemes_detail;

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
size_t TensorSpec::nbytes() const { return size_t(numel()) * size_t(dtype_bits(dtype)) / 8; }

size_t PackedTensor::bytes() const { return data.nbytes + scales.nbytes + biases.nbytes; }
double PackedTensor::bits_per_weight() const {
  return rows * cols > 0 ? 8.0 * double(bytes()) / double(rows * cols) : 0.0;
}

const std::vector<Scheme>& scheme_table() {
  static const std::vector<Scheme> table = {kAffine, kInt8,     kInt8Ct, kInt4,    kInt4Ct, kNf4,    kFp4,
                                            kFp8,    kFp8Block, kNvfp4,  kNvfp4A4, kMxfp4,  kMxfp4A4};
  return table;
}

const Scheme& find_scheme(std::string_view name) {
  for (const Scheme& s : scheme_table())
    if (name == s.name) return s;
  user_error("unknown scheme '{}' (known: {})", name, scheme_names());
}

std::string scheme_names() {
  std::vector<std::string> names;
  for (const Scheme& s : scheme_table()) names.push_back(s.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

const Scheme& stored_row(std::string_view scheme, std::string_view layout) {
  const Scheme& s = find_scheme(scheme);
  for (const StoredAs& l : s.layouts)
    if (layout == l.layout) return l.row ? find_scheme(l.row) : s;
  // What each layout stores, in the order layouts first appear in the table.
  std::vector<std::pair<std::string, std::vector<std::string>>> by_layout;
  for (const Scheme& r : scheme_table())
    for (const StoredAs& l : r.layouts) {
      auto it = std::find_if(by_layout.begin(), by_layout.end(), [&](auto& e) { return e.first == l.layout; });
      if (it == by_layout.end()) it = by_layout.insert(by_layout.end(), {l.layout, {}});
      it->second.push_back(r.name);
    }
  std::vector<std::string> parts;
  for (auto& [l, rows] : by_layout) {
    const bool any = rows.size() == scheme_table().size();
    parts.push_back(fmt::format("{}: {}", l, any ? "any" : fmt::format("{}", fmt::join(rows, ", "))));
  }
  user_error("--scheme {} cannot be written as --format {} ({})", scheme, layout, fmt::join(parts, "; "));
}

const char* closest_gguf_type(const Scheme& s, int bits) {
  if (bits < 0) bits = s.default_bits;
  for (const GgufNearest& g : s.gguf)
    if (g.bits == bits || g.bits == 0) return g.type;
  return "q8_0";
}

SchemeParams default_params(std::string_view name) {
  const Scheme& s = find_scheme(name);
  SchemeParams p;
  p.scheme = s.name;
  p.bits = s.default_bits;
  p.group_size = s.default_group_size;
  return p;
}

namespace {

const Scheme* lookup(std::string_view name) {
  for (const Scheme& s : scheme_table())
    if (name == s.name) return &s;
  return nullptr;
}

std::string group_name(int g) { return g == 0 ? "0 (per channel)" : std::to_string(g); }

}  // namespace

bool scheme_fits(const SchemeParams& p, int64_t rows, int64_t cols, std::string* why) {
  auto fail = [&](std::string msg) {
    if (why) *why = std::move(msg);
    return false;
  };
  const Scheme* s = lookup(p.scheme);
  if (!s) return fail(fmt::format("unknown scheme '{}' (known: {})", p.scheme, scheme_names()));
  if (std::find(s->bits.begin(), s->bits.end(), p.bits) == s->bits.end())
    return fail(fmt::format("{} does not support {} bits (supported: {})", s->name, p.bits, fmt::join(s->bits, ", ")));
  if (std::find(s->group_sizes.begin(), s->group_sizes.end(), p.group_size) == s->group_sizes.end()) {
    std::vector<std::string> gs;
    for (int g : s->group_sizes) gs.push_back(group_name(g));
    return fail(
        fmt::format("{} does not support group size {} (supported: {})", s->name, p.group_size, fmt::join(gs, ", ")));
  }
  if (p.dtype != DType::F32 && p.dtype != DType::F16 && p.dtype != DType::BF16)
    return fail(fmt::format("{} quantizes F32, F16 or BF16 weights, not {}", s->name, dtype_name(p.dtype)));
  if (rows <= 0 || cols <= 0) return fail(fmt::format("cannot quantize an empty [{}, {}] tensor", rows, cols));
  // bitsandbytes blocks run over the flattened tensor (a partial last block is allowed there);
  // every other row groups columns within a row.
  if (!s->flat_blocks && p.group_size != 0 && cols % p.group_size != 0)
    return fail(
        fmt::format("group size {} does not divide the row length {} ({} groups run along "
                    "each row)",
                    p.group_size, cols, s->name));
  if (cols % s->col_align != 0)
    return fail(s->col_align == 2
                    ? fmt::format("{} packs two columns per byte; the row length {} is odd", s->name, cols)
                    : fmt::format("{} packs {} columns per byte; the row length {} is not a multiple of it", s->name,
                                  s->col_align, cols));
  return true;
}

void validate_scheme(const SchemeParams& p, int64_t rows, int64_t cols, std::string_view what) {
  std::string why;
  if (!scheme_fits(p, rows, cols, &why)) user_error("{}: {}", what, why);
}

PackedLayout packed_layout(const SchemeParams& p, int64_t rows, int64_t cols) {
  validate_scheme(p, rows, cols, "layout");
  return find_scheme(p.scheme).layout(p, rows, cols);
}

double scheme_bits_per_weight(const SchemeParams& p, int64_t rows, int64_t cols) {
  PackedLayout l = packed_layout(p, rows, cols);
  size_t bytes = l.data.nbytes() + l.scales.nbytes() + (l.biases ? l.biases->nbytes() : 0);
  return 8.0 * double(bytes) / double(rows * cols);
}

namespace {
// Whether any of w[0, n) is Inf/NaN; *low gets the OR of the low 16 bits of every value (0: all
// are bf16 values). Cloned for AVX2: the library is built for the baseline ISA.
__attribute__((target_clones("avx2", "default"))) bool any_non_finite(const float* w, size_t n, uint32_t* low) {
  uint32_t all_exp = 0, any_low = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &w[i], 4);
    all_exp |= uint32_t((u & 0x7f800000u) == 0x7f800000u);
    any_low |= u & 0xffffu;
  }
  *low = any_low;
  return all_exp != 0;
}
}  // namespace

namespace schemes_detail {
__attribute__((target_clones("avx2", "default"))) float span_absmax(const float* v, int64_t n) {
  float m = 0.0f;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::abs(v[i]);
    m = a > m ? a : m;
  }
  return m;
}
}  // namespace schemes_detail

namespace {
// quantize_weights of rows [row0, row0 + rows) of a weight: errors name the whole weight's row.
PackedTensor quantize_rows(const float* w, int64_t rows, int64_t cols, const SchemeParams& p, std::string_view what,
                           int64_t row0) {
  size_t n = size_t(rows) * size_t(cols);
  // One branch-free pass (it vectorizes; convert runs it over every weight of the model): any
  // non-finite value, and any value that is not already a bf16 (then the rounded copy below).
  uint32_t any_low = 0;
  if (any_non_finite(w, n, &any_low))
    for (size_t i = 0; i < n; ++i)
      if (!std::isfinite(w[i]))
        user_error("{}: non-finite weight {} at [{}, {}]; cannot quantize", what, w[i], size_t(row0) + i / size_t(cols),
                   i % size_t(cols));
  const Scheme& s = find_scheme(p.scheme);
  // Weights that came from a bf16 tensor are their own bf16 rounding: no copy to round.
  if (p.dtype == DType::F32 || (p.dtype == DType::BF16 && !any_low)) return s.quantize(w, rows, cols, p);
  std::vector<float> rounded(w, w + n);
  for (float& v : rounded) {
    v = round_to(p.dtype, v);
    if (!std::isfinite(v)) user_error("{}: weight overflows {}; cannot quantize", what, dtype_name(p.dtype));
  }
  return s.quantize(rounded.data(), rows, cols, p);
}
}  // namespace

PackedTensor quantize_weights(const float* w, int64_t rows, int64_t cols, const SchemeParams& p,
                              std::string_view what) {
  validate_scheme(p, rows, cols, what);
  return quantize_rows(w, rows, cols, p, what, 0);
}

PackedTensor quantize_tensor(const Tensor& source, const SchemeParams& p, std::string_view what) {
  if (source.shape.size() != 2) user_error("{}: cannot quantize a tensor of {} dimensions", what, source.shape.size());
  const int64_t rows = source.shape[0], cols = source.shape[1];
  validate_scheme(p, rows, cols, what);
  const Tensor src = source.deferred() ? materialize(source) : source;  // a GGUF tensor is made once
  const Scheme& s = find_scheme(p.scheme);
  if (s.tensor_scale) {  // one scale of the whole tensor (its own, or given: fused projections'), one chunk
    SchemeParams q = p;
    const std::vector<float> all = to_f32(src);
    if (q.global_scale <= 0.0f) q.global_scale = s.tensor_scale(all.data(), rows * cols, p);
    PackedTensor t = quantize_rows(all.data(), rows, cols, q, what, 0);
    t.params = p;
    return t;
  }
  // Rows per chunk: about 64 K values (256 KB of fp32, which stays in L2 from widening to
  // quantizing), a whole number of blocks where blocks run over the flattened tensor or span rows
  // (fp8_block), so that every chunk but the last packs to the same number of bytes and the last
  // holds any partial block.
  const int64_t step = s.flat_blocks ? p.group_size / std::gcd(cols, int64_t(p.group_size)) : s.block_rows;
  const int64_t per = std::max(step, std::max<int64_t>(1, (int64_t(1) << 16) / cols) / step * step);
  const int64_t chunks = (rows + per - 1) / per;
  thread_local std::vector<float> buf;
  if (chunks == 1) {
    buf.resize(size_t(rows * cols));
    to_f32_range(src, 0, buf.size(), buf.data());
    return quantize_rows(buf.data(), rows, cols, p, what, 0);
  }
  const PackedLayout whole = s.layout(p, rows, cols), one = s.layout(p, per, cols);
  OutTensor data(whole.data), scales(whole.scales);
  std::optional<OutTensor> biases;
  if (whole.biases) biases.emplace(*whole.biases);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    try {
      const int64_t r0 = c * per, r = std::min(per, rows - r0);
      thread_local std::vector<float> w;
      w.resize(size_t(r * cols));
      to_f32_range(src, size_t(r0 * cols), w.size(), w.data());
      const PackedTensor t = quantize_rows(w.data(), r, cols, p, what, r0);
      auto put = [&](OutTensor& out, const Tensor& part, const TensorSpec& full_chunk) {
        const size_t at = size_t(c) * full_chunk.nbytes();
        if (at + part.nbytes > out.bytes->size() || (c == chunks - 1 && at + part.nbytes != out.bytes->size()))
          throw std::logic_error(fmt::format("{}: chunk {} of {} does not tile the packed tensor", what, c, chunks));
        std::memcpy(out.bytes->data() + at, part.data, part.nbytes);
      };
      put(data, t.data, one.data);
      put(scales, t.scales, one.scales);
      if (biases) put(*biases, t.biases, *one.biases);
    } catch (...) {
      errors[size_t(c)] = std::current_exception();
    }
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return finish_packed(p, rows, cols, data, scales, biases ? &*biases : nullptr);
}

void check_packed(const PackedTensor& t, std::string_view what) {
  validate_scheme(t.params, t.rows, t.cols, what);
  PackedLayout l = find_scheme(t.params.scheme).layout(t.params, t.rows, t.cols);
  auto check = [&](const Tensor& got, const TensorSpec& want, const char* role) {
    if (got.dtype != want.dtype || got.shape != want.shape || got.nbytes != want.nbytes() ||
        (want.nbytes() > 0 && got.data == nullptr))
      user_error(
          "{}: {} {} has {} {} ({} bytes), expected {} {} for {} {}-bit group {} of "
          "[{}, {}]",
          what, t.params.scheme, role, dtype_name(got.dtype), fmt::join(got.shape, "x"), got.nbytes,
          dtype_name(want.dtype), fmt::join(want.shape, "x"), t.params.scheme, t.params.bits, t.params.group_size,
          t.rows, t.cols);
  };
  check(t.data, l.data, "codes");
  check(t.scales, l.scales, "scales");
  if (l.biases)
    check(t.biases, *l.biases, "biases");
  else if (t.biases.data != nullptr || t.biases.nbytes != 0)
    user_error("{}: {} has no biases, but biases were given", what, t.params.scheme);
}

void dequantize_weights(const PackedTensor& t, float* out, std::string_view what) {
  check_packed(t, what);
  find_scheme(t.params.scheme).dequantize(t, out);
}

std::vector<float> dequantize_weights(const PackedTensor& t, std::string_view what) {
  check_packed(t, what);
  std::vector<float> out(size_t(t.rows) * size_t(t.cols));
  find_scheme(t.params.scheme).dequantize(t, out.data());
  return out;
}

}  // namespace qt
