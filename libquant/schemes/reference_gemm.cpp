// Scalar reference matmuls from packed weights: the spec the SIMD kernels are tested against
// (formulas in scheme.h). Each format's codes are unpacked here from the stored bytes by their
// layout's definition (docs/spec/mlx-affine.md §Packing, bitsandbytes.md; scheme.h), independently
// of the rows' dequantize code, so the tests also cross-check the two readings of every layout.
#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "formats/error.h"
#include "libquant/schemes/detail.h"
#include "libquant/schemes/e4m3.h"

namespace qt {

using namespace schemes_detail;

std::span<const float, 16> bnb_code_table(std::string_view quant_type) {
  for (const Scheme& s : scheme_table())
    if (quant_type == s.name && s.grid.kind == GridKind::Table) return std::span<const float, 16>(s.grid.table, 16);
  user_error("unknown bitsandbytes 4-bit type '{}' (known: nf4, fp4)", quant_type);
}

namespace {

// Row n of W, dequantized from the packed bytes.
using DecodeRow = void (*)(const PackedTensor& w, int64_t n, float* out);
// Row n of W as signed integer codes (int4: u − 8) and its per-group scales as fp32.
using IntRow = void (*)(const PackedTensor& w, int64_t n, int8_t* q, float* scales);

// affine: element j of the row at bits [j·bits, (j+1)·bits) of the row's byte stream, LSB first.
void affine_row(const PackedTensor& w, int64_t n, float* out) {
  const int bits = w.params.bits, g = w.params.group_size;
  const uint8_t* row = w.data.data + size_t(n) * size_t(w.cols) * size_t(bits) / 8;
  const int64_t groups = w.cols / g;
  for (int64_t j = 0; j < w.cols; ++j) {
    uint32_t q = 0;
    for (int b = 0; b < bits; ++b) {
      const int64_t bit = j * bits + b;
      q |= uint32_t((row[bit >> 3] >> (bit & 7)) & 1) << b;
    }
    const size_t gi = size_t(n * groups + j / g);
    out[j] = affine_dequant(q, load_float(w.scales, gi), load_float(w.biases, gi), w.params.dtype);
  }
}

// nf4 / fp4: flat index i = n·cols + j; byte i/2, high nibble for even i.
void bnb_row(const PackedTensor& w, int64_t n, float* out) {
  const float* table = bnb_code_table(w.params.scheme).data();
  const float* absmax = w.scales.as<float>();
  for (int64_t j = 0; j < w.cols; ++j) {
    const int64_t i = n * w.cols + j;
    const uint8_t byte = w.data.data[i / 2];
    const int code = (i & 1) ? (byte & 0x0f) : (byte >> 4);
    out[j] = round_to(w.params.dtype, table[code] * absmax[i / w.params.group_size]);
  }
}

// fp8: one E4M3 byte per element (e4m3.h), the row's scale in the weights' dtype.
void fp8_row(const PackedTensor& w, int64_t n, float* out) {
  const float s = load_float(w.scales, size_t(n));
  for (int64_t j = 0; j < w.cols; ++j) out[j] = round_to(w.params.dtype, e4m3_to_f32(w.data.data[n * w.cols + j]) * s);
}

void int8_codes(const PackedTensor& w, int64_t n, int8_t* q, float* scales) {
  const int64_t ng = n_groups(w.params, w.cols);
  std::copy_n(w.data.as<int8_t>() + n * w.cols, w.cols, q);
  for (int64_t g = 0; g < ng; ++g) scales[g] = load_float(w.scales, size_t(n * ng + g));
}

void int4_codes(const PackedTensor& w, int64_t n, int8_t* q, float* scales) {
  const int64_t ng = n_groups(w.params, w.cols);
  const uint8_t* row = w.data.data + n * (w.cols / 2);
  for (int64_t j = 0; j < w.cols; j += 2) {
    q[j] = int8_t(int(row[j / 2] >> 4) - 8);
    q[j + 1] = int8_t(int(row[j / 2] & 0x0f) - 8);
  }
  for (int64_t g = 0; g < ng; ++g) scales[g] = w.scales.as<float>()[n * ng + g];
}

void int4_ct_codes(const PackedTensor& w, int64_t n, int8_t* q, float* scales) {
  const int64_t ng = n_groups(w.params, w.cols);
  const uint32_t* row = w.data.as<uint32_t>() + n * (w.cols / 8);
  for (int64_t j = 0; j < w.cols; ++j) q[j] = int8_t(int((row[j / 8] >> (4 * (j % 8))) & 15) - 8);
  for (int64_t g = 0; g < ng; ++g) scales[g] = load_float(w.scales, size_t(n * ng + g));
}

// Weight-only dequantized rows of the integer schemes, from their integer codes.
void int_row_deq(const PackedTensor& w, int64_t n, float* out, IntRow codes, bool round_dtype) {
  std::vector<int8_t> q(static_cast<size_t>(w.cols));
  std::vector<float> s(static_cast<size_t>(n_groups(w.params, w.cols)));
  codes(w, n, q.data(), s.data());
  const int64_t gl = group_len(w.params, w.cols);
  for (int64_t j = 0; j < w.cols; ++j) {
    const float v = float(q[size_t(j)]) * s[size_t(j / gl)];
    out[j] = round_dtype ? round_to(w.params.dtype, v) : v;
  }
}
void int8_row(const PackedTensor& w, int64_t n, float* out) { int_row_deq(w, n, out, int8_codes, false); }
void int8_ct_row(const PackedTensor& w, int64_t n, float* out) { int_row_deq(w, n, out, int8_codes, true); }
void int4_row(const PackedTensor& w, int64_t n, float* out) { int_row_deq(w, n, out, int4_codes, false); }
void int4_ct_row(const PackedTensor& w, int64_t n, float* out) { int_row_deq(w, n, out, int4_ct_codes, true); }

struct RefRow {
  std::string_view scheme;
  DecodeRow decode;
  IntRow int_codes;  // null: no integer path
};
constexpr RefRow kRefRows[] = {
    {"affine", affine_row, nullptr}, {"int8", int8_row, int8_codes},    {"int8_ct", int8_ct_row, int8_codes},
    {"int4", int4_row, int4_codes},  {"int4_ct", int4_ct_row, nullptr},  // W4A16: weight-only
    {"nf4", bnb_row, nullptr},       {"fp4", bnb_row, nullptr},         {"fp8", fp8_row, nullptr},
};

const RefRow& ref_row(std::string_view scheme) {
  for (const RefRow& r : kRefRows)
    if (r.scheme == scheme) return r;
  user_error("reference_gemm: no reference for scheme '{}'", scheme);
}

}  // namespace

void reference_gemm(const PackedTensor& w, const float* x, int64_t n_tokens, float* y, ActMode mode) {
  check_packed(w, "reference_gemm");
  const Scheme& scheme = find_scheme(w.params.scheme);
  const RefRow& rr = ref_row(w.params.scheme);
  if (mode == ActMode::Default)
    mode = scheme.int8_activations()                    ? ActMode::Int8PerToken
           : scheme.kernel == KernelFamily::Fp8PerToken ? ActMode::Fp8PerToken
                                                        : ActMode::None;
  const int64_t N = w.rows, K = w.cols;

  if (mode == ActMode::None) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      std::vector<float> row(static_cast<size_t>(K));
      rr.decode(w, n, row.data());
      for (int64_t t = 0; t < n_tokens; ++t) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; ++k) acc += double(x[t * K + k]) * double(row[size_t(k)]);
        y[t * N + n] = float(acc);
      }
    }
    return;
  }

  if (mode == ActMode::Fp8PerToken) {
    if (scheme.kernel != KernelFamily::Fp8PerToken)
      user_error("reference_gemm: scheme {} has no fp8-activation path", w.params.scheme);
    std::vector<float> a(static_cast<size_t>(n_tokens * K)), s_x(static_cast<size_t>(n_tokens));
    quantize_activations_fp8(x, n_tokens, K, a.data(), s_x.data());
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* q = w.data.data + n * K;
      const float s_w = load_float(w.scales, size_t(n));
      for (int64_t t = 0; t < n_tokens; ++t) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; ++k) acc += double(a[size_t(t * K + k)]) * double(e4m3_to_f32(q[k]));
        y[t * N + n] = s_x[size_t(t)] * (s_w * float(acc));
      }
    }
    return;
  }
  if (!rr.int_codes) user_error("reference_gemm: scheme {} has no int8-activation path", w.params.scheme);
  std::vector<int8_t> a(static_cast<size_t>(n_tokens * K));
  std::vector<float> s_x(static_cast<size_t>(n_tokens));
  quantize_activations_int8(x, n_tokens, K, a.data(), s_x.data());
  const int64_t ng = n_groups(w.params, K), gl = group_len(w.params, K);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    std::vector<int8_t> q(static_cast<size_t>(K));
    std::vector<float> s_w(static_cast<size_t>(ng));
    rr.int_codes(w, n, q.data(), s_w.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int8_t* at = a.data() + t * K;
      float sum = 0.0f;
      for (int64_t g = 0; g < ng; ++g) {
        int32_t acc = 0;
        for (int64_t k = g * gl; k < (g + 1) * gl; ++k) acc += int32_t(at[k]) * int32_t(q[size_t(k)]);
        sum += s_w[size_t(g)] * float(acc);
      }
      y[t * N + n] = s_x[size_t(t)] * sum;
    }
  }
}

}  // namespace qt
