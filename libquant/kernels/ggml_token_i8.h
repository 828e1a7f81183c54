// A token rounded to int8 for the GEMVs over GGUF blocks through int8 activations, as llama.cpp's
// CPU backend computes them (ggml-cpu's quantize_row_q8_0 then vec_dot_q4_0_q8_0 and friends: the
// codes multiplied as integers, the scales after; the kernels: ggml_interleaved.h) — with fp32
// scales, and per 32 for the K-quants too (llama.cpp: fp16 scales; Q8_K, per 256). An opt-in
// (--weight-act int8) beside the exact fp32 dots of ggml_decode.h: the token's rounding is the
// price, measured in results/bench.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace qt::kernels {

// A token rounded to int8 per block of 32: d = max|x| / 127, q = nearest(x / d) (d = 0, q = 0 for a
// block of zeros), and the sums of q over each 16 and each 32.
struct GgmlTokenI8 {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum16;
  std::vector<float> sum32;  // the sum over each 32, as fp32 (exact)
};
// k: a multiple of 256 or of 32 (the K-quant kernels need whole super-blocks, which their rows are).
void ggml_quantize_token(const float* x, int64_t k, GgmlTokenI8* t);

// The CPU has what the int8 kernels need: AVX-512 VNNI with BW, VL, DQ, F16C and FMA.
bool ggml_i8_supported();

}  // namespace qt::kernels
