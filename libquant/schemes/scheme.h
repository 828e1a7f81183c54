// Weight quantization schemes: one row of a table per format (ggml's type_traits idea), each with
// the math of the library that defines the format — quantize, dequantize — bit-exact with it, and
// a scalar reference GEMM from the packed weights (reference_gemm.cpp) that the fast kernels are
// tested against. Convert writers and kernels build on these; nothing here knows about files.
//
// Rows (names are what `--scheme` takes):
//   affine   MLX `mlx.core.quantize(mode="affine")`, CPU kernel; bits 2,3,4,5,6,8 × group 32/64/128.
//   int8     W8A8 weights, Cider convention (docs/spec/int8-w8a8.md): s = absmax/127 (fp32),
//            per output channel (group 0) or per group 64/128 along the row.
//   int8_ct  int8 as compressed-tensors (llm-compressor's W8A8 preset) computes it
//            (docs/spec/compressed-tensors.md): s = absmax/127.5 in the weights' dtype, per channel
//            or group 64/128.
//   int4     W4A8 weights, Cider convention (int8-w8a8.md): s = absmax/7, u = q + 8 in [1,15],
//            two per byte (high nibble = even column), per channel or group 128.
//   nf4/fp4  bitsandbytes blockwise absmax over the flattened tensor, blocksize 64/128.
//
// Weights are an HF Linear's [rows = out_features, cols = in_features], row-major.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/tensor.h"

namespace qt {

struct SchemeParams {
  std::string scheme = "affine";
  int bits = 4;
  // Elements sharing one scale. affine/int8/int8_ct/int4: consecutive columns of one row
  // (0 = the whole row: one scale per output channel). nf4/fp4: bitsandbytes' blocksize over the
  // flattened tensor (blocks may span rows; the last one may be partial, as in bitsandbytes).
  int group_size = 64;
  // Dtype of the source weights (F32, F16 or BF16). Inputs are rounded to it first (a no-op when
  // they came from a tensor of that dtype), so quantize(w) equals the library quantizing
  // w.astype(dtype). Where the format stores scales/biases in the weights' dtype (affine,
  // int8_ct) they get this dtype; dequantized values are rounded to it where the library's
  // dequantize returns that dtype (affine, int8_ct, nf4/fp4).
  DType dtype = DType::F32;
};

// Dtype and shape of one stored tensor.
struct TensorSpec {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t numel() const;
  size_t nbytes() const;
};

// What a packed weight consists of, as the format stores it on disk:
//   affine   data U32 [rows, cols*bits/32] (one LSB-first bit stream per row, mlx-affine.md);
//            scales, biases: dtype [rows, cols/group]
//   int8     data I8 [rows, cols]; scales F32 [rows, n_groups] (n_groups = 1 per channel).
//            Cider keeps per-group scales transposed ([n_groups, rows]) in memory; ours are rows.
//   int8_ct  data I8 [rows, cols]; scales dtype [rows, n_groups] (compressed-tensors'
//            weight_scale: [out, 1] per channel, [out, in/group] per group)
//   int4     data U8 [rows, cols/2], byte = u[2i] << 4 | u[2i+1]; scales F32 [rows, n_groups].
//            (Cider's pack_weight_int4 returns the transpose: [cols/2, rows] for W given as
//            [cols, rows]; the bytes are the same, only the storage order differs.)
//   int4_ct  data I32 [rows, cols/8], u = q + 8 at bits 4·(j mod 8) of word j/8 (compressed-
//            tensors' weight_packed); scales dtype [rows, cols/group] (weight_scale)
//   nf4/fp4  data U8 [ceil(n/2), 1] with n = rows*cols, first element in the high nibble, odd n
//            padded with code 0; scales (bitsandbytes' absmax) F32 [ceil(n/group)]
struct PackedLayout {
  TensorSpec data, scales;
  std::optional<TensorSpec> biases;  // affine only
};

struct PackedTensor {
  SchemeParams params;
  int64_t rows = 0, cols = 0;  // logical weight shape [out, in]
  Tensor data;
  Tensor scales;
  Tensor biases;  // affine only; otherwise empty (data == nullptr)

  size_t bytes() const;            // data + scales + biases
  double bits_per_weight() const;  // 8 * bytes() / (rows * cols)
};

// Activation handling of reference_gemm.
enum class ActMode {
  Default,       // the scheme's own: Int8PerToken for int8/int8_ct/int4, None otherwise
  None,          // fp32 activations times the dequantized weights (weight-only; decode path)
  Int8PerToken,  // W8A8 / W4A8: activations quantized per token, int32 accumulation
};

// One row of the table.
struct Scheme {
  const char* name;
  const char* summary;
  std::vector<int> bits;         // supported bit widths
  std::vector<int> group_sizes;  // supported group sizes (0 = per output channel)
  int default_bits;
  int default_group_size;
  bool flat_blocks;       // groups run over the flattened tensor (bitsandbytes)
  bool int8_activations;  // W8A8/W4A8: reference_gemm quantizes activations by default
  PackedLayout (*layout)(const SchemeParams& p, int64_t rows, int64_t cols);
  // Called with validated parameters and w already rounded to p.dtype.
  PackedTensor (*quantize)(const float* w, int64_t rows, int64_t cols, const SchemeParams& p);
  // out: rows*cols floats, row-major.
  void (*dequantize)(const PackedTensor& t, float* out);
};

// The table, in the order above.
const std::vector<Scheme>& scheme_table();
// The row named `name`; UserError listing the known names otherwise.
const Scheme& find_scheme(std::string_view name);
// Params for `name` with its default bits and group size; dtype F32.
SchemeParams default_params(std::string_view name);

// Whether `p` is a supported row/bits/group/dtype and fits a [rows, cols] weight; on false,
// `why` (if given) gets the reason, one line without a tensor name. Convert uses this to leave a
// tensor unquantized (as mlx_lm does when the group size does not divide the row).
bool scheme_fits(const SchemeParams& p, int64_t rows, int64_t cols, std::string* why = nullptr);
// Same, but throws UserError "WHAT: reason".
void validate_scheme(const SchemeParams& p, int64_t rows, int64_t cols, std::string_view what);

PackedLayout packed_layout(const SchemeParams& p, int64_t rows, int64_t cols);
// Bits per weight a [rows, cols] tensor takes in this scheme (codes + scales + biases).
double scheme_bits_per_weight(const SchemeParams& p, int64_t rows, int64_t cols);

// Quantize w [rows, cols] (row-major fp32). UserError naming `what` on unsupported parameters or
// a non-finite weight.
PackedTensor quantize_weights(const float* w, int64_t rows, int64_t cols, const SchemeParams& p,
                              std::string_view what = "weight");
// quantize_weights of a stored 2-D tensor (any float dtype, mapped or deferred), widened and
// quantized a chunk of rows at a time (in parallel) instead of through one fp32 copy of the whole:
// the same bytes, without three passes over a buffer of 4 bytes a weight (convert's hot path).
PackedTensor quantize_tensor(const Tensor& source, const SchemeParams& p, std::string_view what = "weight");
// Dequantize to rows*cols floats exactly as the format's library dequantizes (then widened to
// fp32). UserError naming `what` when the tensors do not match packed_layout (a malformed file).
std::vector<float> dequantize_weights(const PackedTensor& t, std::string_view what = "weight");
void dequantize_weights(const PackedTensor& t, float* out, std::string_view what = "weight");
// UserError "WHAT: ..." when t's tensors do not have the dtypes and shapes of packed_layout.
void check_packed(const PackedTensor& t, std::string_view what);

// y[n_tokens, rows] = x[n_tokens, cols] · Wᵀ from the packed weights; the scalar spec of the
// fast kernels. It unpacks the stored codes itself (independently of dequantize).
//  None:         y = Σ_k x[t,k] · deq(W)[n,k], deq exactly as dequantize_weights, summed in
//                double and rounded to fp32 once.
//  Int8PerToken: a[t,:], s_x[t] = quantize_activations_int8(x); per group g an exact int32
//                acc_g = Σ_{k∈g} a[t,k]·q[n,k] (int4: q = u − 8); then, in fp32, in this order:
//                y = s_x[t] · (Σ_g s_w[n,g] · float(acc_g)), the group sum running over g in
//                order (per channel: one group). s_w as stored (int8_ct: its dtype widened).
void reference_gemm(const PackedTensor& w, const float* x, int64_t n_tokens, float* y,
                    ActMode mode = ActMode::Default);

// Per-token dynamic symmetric int8 (docs/spec/int8-w8a8.md, the W8A8/W4A8 activations): for
// each row of x [n_tokens, k]: s = absmax/127 in fp32 (1 for an all-zero row), inv = 1/s,
// q = clamp(rint(x·inv), −128, 127) with round-half-to-even (the multiply by the reciprocal is
// Cider's w8a8_quantize.metal; the rounding is torch.round's and cvtps2dq's).
void quantize_activations_int8(const float* x, int64_t n_tokens, int64_t k, int8_t* q,
                               float* scales);

// bitsandbytes' 4-bit code book ("nf4" or "fp4"), index = code; the P.weight.quant_map tensor.
std::span<const float, 16> bnb_code_table(std::string_view quant_type);

}  // namespace qt
