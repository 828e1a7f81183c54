// GPTQ (gptq.h) in llama.cpp's own block types, for `convert --format gguf --gptq`: the output is
// stock GGUF blocks any llama.cpp reads. Each block's scale fields (Q4_K's super-block scales and
// 6-bit sub-scales and mins, Q3_K's 6-bit signed scales, Q4_0's fp16 d, ...) are chosen by the
// type's own rule when the pass reaches the block's first column, from the row as updated so far:
// ggml's reference rule, or with `weighted_groups` the importance-weighted search of
// `--imatrix` with diag H as the importance (ggml_quantize.h). The sweep then rounds each element
// to the nearest value of that block's fixed grid (every code under the chosen scales, the value
// as the type's dequantizer gives it) and spreads the error as GPTQ does. The codes are packed by
// the type's own packer under the chosen scales, so the file decodes to exactly the values the
// sweep used.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "calib/gptq.h"
#include "calib/sequential.h"
#include "formats/checkpoint.h"
#include "formats/ggml_blocks.h"

namespace qt::calib {

// w [rows, cols] row-major (cols a multiple of the type's block); the packed blocks, row by row
// (ggml_nbytes(type, rows * cols) bytes). `deq`, when given, receives their dequantized values;
// `swept` the values the sweep rounded each weight to (equal to deq: the tests check it). `loss`
// as gptq_quantize's.
std::vector<uint8_t> gptq_quantize_ggml(GgmlType type, const float* w, int64_t rows, int64_t cols, const GptqHessian& h,
                                        const GptqOptions& opt, std::vector<float>* deq = nullptr,
                                        double* loss = nullptr, std::vector<float>* swept = nullptr);

// The sequential pass over the calibration text (sequential.h) for every weight of `types` (HF name
// -> its GGUF type) that it reaches: the block projections and the output head (a tied model's
// embedding). The packed blocks by HF name, rows in the checkpoint's order.
std::map<std::string, std::vector<uint8_t>> gptq_gguf(const Checkpoint& ck,
                                                      const std::map<std::string, GgmlType>& types,
                                                      const std::vector<int32_t>& tokens, const SequentialOptions& so,
                                                      const GptqOptions& go);

}  // namespace qt::calib
