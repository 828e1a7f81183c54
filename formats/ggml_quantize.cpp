// The drivers of ggml quantization over the type rows (ggml_blocks.h): each row's from_float /
// from_float_imatrix does one run of blocks; here the runs are cut into chunks for the threads.
#include "formats/ggml_quantize.h"

#include <algorithm>

#include "formats/ggml_quants_common.h"

namespace qt {

bool ggml_can_quantize(GgmlType type) {
  const GgmlTypeRow* row = ggml_type_row(uint32_t(type));
  return row && row->from_float;
}

size_t ggml_nbytes(GgmlType type, size_t n) {
  const GgmlTypeRow* row = ggml_type_row(uint32_t(type));
  return n / size_t(row->block_size) * size_t(row->type_size);
}

void ggml_quantize(GgmlType type, const float* src, size_t n, uint8_t* dst) {
  const GgmlTypeRow& row = *ggml_type_row(uint32_t(type));
  const size_t bs = size_t(row.block_size), bytes = size_t(row.type_size), nb = n / bs;
  // Chunks of about 4096 values; threads only for inputs big enough to pay for the fork.
  const size_t chunk = std::max<size_t>(1, 4096 / bs);
  const int64_t nchunks = int64_t((nb + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) if (n > (size_t(1) << 17))
  for (int64_t c = 0; c < nchunks; ++c) {
    const size_t b0 = size_t(c) * chunk;
    row.from_float(src + b0 * bs, dst + b0 * bytes, std::min(chunk, nb - b0));
  }
}

void ggml_quantize_llama(GgmlType type, const float* src, size_t n, uint8_t* dst) {
  if (type != GgmlType::IQ4_NL) return ggml_quantize(type, src, n, dst);
  const int64_t nb = int64_t(n / ggml::QK);
#pragma omp parallel for schedule(static) if (n > (size_t(1) << 17))
  for (int64_t b = 0; b < nb; ++b) ggml::quantize_iq4_nl_llama(src + b * ggml::QK, dst + b * 18);
}

void ggml_quantize_weighted(GgmlType type, const float* src, int64_t rows, int64_t cols, const float* imp,
                            uint8_t* dst) {
  const GgmlTypeRow& row = *ggml_type_row(uint32_t(type));
  if (!imp || !row.from_float_imatrix) {
    ggml_quantize(type, src, size_t(rows * cols), dst);
    return;
  }
  const size_t bytes = size_t(row.type_size);
  const int64_t bs = row.block_size, per_row = cols / bs, nb = rows * per_row;
  if (type == GgmlType::Q4_1 || type == GgmlType::Q5_1) {
    // Each block also needs its row's mean x² (σ² of llama.cpp's quantize_row_q5_1_impl, summed in
    // its order).
#pragma omp parallel for schedule(static) if (nb * bs > 1024 * 32)
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = src + r * cols;
      float s = 0;
      for (int64_t j = 0; j < cols; ++j) s += x[j] * x[j];
      const float sigma2 = s / float(cols);
      for (int64_t b = 0; b < per_row; ++b)
        ggml::quantize_legacy_in_row(type, x + b * bs, imp + b * bs, sigma2, dst + size_t(r * per_row + b) * bytes);
    }
    return;
  }
  // One block per call: a block's importances are those of its columns (b % per_row).
#pragma omp parallel for schedule(static) if (nb * bs > 1024 * 32)
  for (int64_t b = 0; b < nb; ++b)
    row.from_float_imatrix(src + b * bs, imp + (b % per_row) * bs, dst + size_t(b) * bytes, 1);
}

GgmlCodeRange ggml_code_range(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0: return {1, 255, 32};
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: return {0, 15, 32};
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: return {0, 31, 32};
    case GgmlType::Q2_K: return {0, 3, 16};
    case GgmlType::Q3_K: return {0, 7, 16};
    case GgmlType::Q4_K: return {0, 15, 32};
    case GgmlType::Q5_K: return {0, 31, 32};
    case GgmlType::Q6_K: return {0, 63, 16};
    case GgmlType::MXFP4: return {0, 14, 32};  // by value, not the stored E2M1 code
    default: return {};
  }
}

void ggml_quantize_block(GgmlType type, const float* x, const float* imp, uint8_t* y) {
  const GgmlTypeRow& row = *ggml_type_row(uint32_t(type));
  if (imp && row.from_float_imatrix)
    row.from_float_imatrix(x, imp, y, 1);
  else
    row.from_float(x, y, 1);
}

void ggml_pack_codes(GgmlType type, const uint8_t* L, uint8_t* y) {
  switch (type) {
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: ggml::pack_codes_iq4_nl(type, L, y); return;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: ggml::pack_codes_k(type, L, y); return;
    case GgmlType::MXFP4: ggml::pack_codes_mxfp4(type, L, y); return;
    default: ggml::pack_codes_legacy(type, L, y); return;
  }
}

}  // namespace qt
