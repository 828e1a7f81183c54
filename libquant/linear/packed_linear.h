// Linears over packed (quantized) weights: the scheme's stored codes stay packed in memory, in
// whatever layout the kernel likes (repacked once at load), and every forward computes from
// them — no whole-matrix dequantize. One family of kernels per kind of arithmetic:
//   int8, int8_ct, int4   integer dot products (W8A8 / W4A8): activations quantized per token to
//                         int8, exact int32 accumulation, bit-identical to reference_gemm
//                         (AVX-512 VNNI kernels/int8_vnni.cpp; other levels a scalar loop) —
//                         libquant/linear/int_linear.cpp, make_int_linear
//   fp8                   activations rounded to E4M3 per token, E4M3 weights decoded once to fp32
//                         values for the dense GEMM microkernels, scales after the dot products —
//                         libquant/linear/fp8_linear.cpp, make_fp8_linear
//   affine, nf4, fp4      weight-only: one panel of rows decoded to fp32 (or bf16) at a time and
//                         fed to the dense GEMM microkernels, fp32 activations (affine 4-bit on
//                         request: int8 activations, kernels/affine_i8.h) —
//                         libquant/linear/weight_only_linear.cpp, make_weight_only_linear
//   nvfp4, mxfp4 (+ _a4)  decoded once to dequantize_weights' values for the dense GEMM; the _a4
//                         rows round activations first — libquant/linear/dequantized_linear.cpp,
//                         make_dequantized_linear
// The scalar spec for both is reference_gemm (libquant/schemes/scheme.h).
#pragma once
#include <memory>
#include <string>

#include "libquant/linear/linear.h"
#include "libquant/schemes/scheme.h"

namespace qt {

enum class WeightAct { Default, Int8Group, Int8Token };

struct PackedLinearOptions {
  // Weight-only schemes: the arithmetic after decoding the codes (BF16: decoded weights and
  // activations rounded to bf16, fp32 accumulation, where the CPU has AVX512-BF16).
  Compute compute = Compute::F32;
  // Integer schemes: Default/Int8PerToken quantizes activations per token (W8A8/W4A8);
  // None multiplies fp32 activations by the dequantized weights (the decode path).
  // Affine 4/8-bit with fp32 scales: Default rounds the tokens per group to int16 for the integer
  // kernels (affine_gemv.h, affine_i16_gemm.h); None keeps them fp32 (decoded fp32 panels).
  ActMode act = ActMode::Default;
  // Affine 4-bit weights only (other layers ignore it): Int8Group / Int8Token quantize the tokens to
  // int8 per weight group / per token for the Q4_1 × Q8_1 kernels (kernels/affine_i8.h), at every
  // batch size; Default runs them as `act` says.
  WeightAct weight_act = WeightAct::Default;
};

// The --weight-act flag's value ("", "int8", "int8-token") as a WeightAct.
inline WeightAct weight_act_from_flag(const std::string& flag) {
  return flag == "int8" ? WeightAct::Int8Group : flag == "int8-token" ? WeightAct::Int8Token : WeightAct::Default;
}

// Dispatches on the kernel family of w's scheme row (its kernel_form first, if any). `bias` (out_features floats) may be null. UserError when the
// tensors do not match the scheme's layout (check_packed).
std::unique_ptr<Linear> make_packed_linear(PackedTensor w, const float* bias, const PackedLinearOptions& opt = {});

// The families (int_linear.cpp, weight_only_linear.cpp, fp8_linear.cpp).
std::unique_ptr<Linear> make_int_linear(PackedTensor w, const float* bias, const PackedLinearOptions& opt);
std::unique_ptr<Linear> make_weight_only_linear(PackedTensor w, const float* bias, const PackedLinearOptions& opt);
std::unique_ptr<Linear> make_fp8_linear(PackedTensor w, const float* bias, const PackedLinearOptions& opt);
std::unique_ptr<Linear> make_dequantized_linear(PackedTensor w, const float* bias, const PackedLinearOptions& opt);

}  // namespace qt
