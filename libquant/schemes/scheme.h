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
//   int4_ct  int4 as compressed-tensors packs it (W4A16 pack-quantized): s = absmax/7.5 in the
//            weights' dtype per group 32/64/128, eight codes to an int32; weight-only.
//   nf4/fp4  bitsandbytes blockwise absmax over the flattened tensor, blocksize 64/128.
//   fp8      FP8 E4M3 weights as compressed-tensors computes them (llm-compressor's FP8_DYNAMIC
//            preset; docs/spec/compressed-tensors.md §FP8): s = absmax/448 in the weights' dtype per
//            output channel; activations rounded to E4M3 per token (dynamic).
//   fp8_block FP8 E4M3 in 128×128 blocks (llm-compressor's FP8_BLOCK preset): one scale per block,
//            activations rounded to E4M3 in dynamic groups of 128 columns (fp8_block.cpp).
//   nvfp4    NVFP4 as compressed-tensors computes it (its NVFP4A16 preset, nvfp4-pack-quantized):
//            E2M1 codes, one E4M3 scale per 16 columns, one FP32 global scale per tensor
//            (448·6/absmax); weight-only. nvfp4_a4: the same weights with the NVFP4 preset's
//            activations (E2M1 per 16 with E4M3 scales; nvfp4.cpp says which global scale).
//   mxfp4    MXFP4 (the MXFP4A16 preset, mxfp4-pack-quantized): E2M1 codes, one E8M0 (power of
//            two) scale per 32 columns; weight-only. mxfp4_a4: activations E2M1 per 32 (MXFP4).
// Each row also says which kernels run it, its grid (the rounding its quantize and the calibrated
// quantizers share: grid.h), the output layouts that store it and the nearest GGUF type.
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
  // nvfp4: the tensor's FP32 global scale (0: quantize computes it from the weight's absmax, as
  // llm-compressor does; a calibrated quantizer fixes it first, SchemeGrid::for_weight).
  float global_scale = 0.0f;
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
//   fp8      data F8_E4M3 [rows, cols] (e4m3.h); scales dtype [rows, 1] (compressed-tensors'
//            weight_scale)
//   fp8_block data F8_E4M3 [rows, cols]; scales dtype [ceil(rows/128), cols/128], one per block
//   nvfp4    data U8 [rows, cols/2], code of column 2i in the low nibble (compressed-tensors'
//            weight_packed); scales F8_E4M3 [rows, cols/16] (weight_scale); biases F32 [1]: the
//            global scale (weight_global_scale)
//   mxfp4    data U8 [rows, cols/2] as nvfp4; scales U8 [rows, cols/32]: E8M0 biased exponents
struct PackedLayout {
  TensorSpec data, scales;
  std::optional<TensorSpec> biases;  // affine; nvfp4's global scale
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
  Fp8PerToken,   // FP8: activations rounded to E4M3 per token (quantize_activations_fp8)
};

// A group's parameters as the grid sees them (grid.h): value = f(code)·scale (+ bias).
struct GroupParams {
  float scale = 1.0f;
  float bias = 0.0f;  // affine only
};

// Which fast kernels run a row (libquant/model, libquant/cuda).
enum class KernelFamily {
  Int8PerToken,  // W8A8 / W4A8: int8 codes (int4 unpacked to int8) times activations quantized
                 // per token to int8, int32 accumulation
  Affine,        // weight-only: value = q·scale + bias from mlx's LSB-first code stream
  CodeBook4,     // weight-only: value = table[code]·absmax, blocks over the flattened tensor
  Fp8PerToken,   // FP8: E4M3 codes times activations rounded to E4M3 per token, the scales applied
                 // after the dot product
  Dequantized,   // FP4 (nvfp4, mxfp4): the weights decoded once (dequantize_weights) for the dense
                 // GEMM; activations rounded first where the row has round_activations
};

// How a row's codes relate to values.
enum class GridKind {
  Affine,     // q in [0, 2^bits − 1], value = q·scale + bias
  Symmetric,  // q in [qmin, qmax], value = q·scale; the RTN scale is absmax / top
  Table,      // q in [0, 15] indexes a 16-value code book, value = table[q]·scale; RTN scale = absmax
  Float,      // q is a minifloat's code (E4M3 byte, E2M1 nibble), value = its float value·scale;
              // RTN scale = absmax / top (the format's largest finite value)
};

// A row's per-group rule as separate steps, for quantizers that choose the parameters themselves
// (SchemeGrid, grid.h). The steps call the same rounding functions as the row's quantize, so
// fit_rtn + code + pack is quantize_weights byte for byte (tests/test_calibrated_quant.cpp).
struct GridRule {
  GridKind kind;
  int qmin, qmax;      // the code range (Affine: 0 and 2^bits − 1, set per bit width by SchemeGrid)
  float top;           // Symmetric: the RTN scale's divisor of absmax (Cider 127 / 7; compressed-
                       // tensors (qmax − qmin)/2 = 127.5 / 7.5); 0 otherwise
  const float* table;  // Table: the code book, index = code; nullptr otherwise
  // The row's RTN parameters for the n values of one group, unrounded (as its quantize codes with).
  GroupParams (*fit_rtn)(const float* v, int64_t n, const SchemeParams& p);
  // The row's rounding of x under g, as its quantize rounds.
  int (*code)(float x, const GroupParams& g, const SchemeParams& p);
  // The value code q dequantizes to under stored parameters g (as dequantize_weights).
  float (*value)(int q, const GroupParams& g, const SchemeParams& p);
  // The codes of one row of a weight into that row's bytes of the packed data.
  void (*pack_row)(const int16_t* q, int64_t cols, const SchemeParams& p, uint8_t* dst);
  // Rows whose scales are not a float dtype (nvfp4: E4M3 of scale·global; mxfp4: E8M0): the
  // parameters as stored (rounded to what the byte holds) and that byte. nullptr: round_to.
  GroupParams (*store)(const GroupParams& g, const SchemeParams& p) = nullptr;
  uint8_t (*scale_byte)(const GroupParams& g, const SchemeParams& p) = nullptr;
  // Rows whose stored scales are few enough to try one by one (nvfp4: E4M3 codes): writes into
  // out (at most cap) every stored scale a weighted search should try for a group whose absmax
  // is amax, ascending, and returns how many. nullptr: the search sweeps factors of the RTN scale.
  int (*scale_candidates)(float amax, const SchemeParams& p, GroupParams* out, int cap) = nullptr;
};

// A layout that stores a row (the output layouts of convert: formats/layouts), and the row it is
// stored as there (nullptr: this row itself).
struct StoredAs {
  const char* layout;
  const char* row = nullptr;
};

// The GGUF type nearest to what a row stores, for a bit width (0: any other).
struct GgufNearest {
  int bits;
  const char* type;
};

// One row of the table.
struct Scheme {
  const char* name;
  const char* summary;
  std::vector<int> bits;         // supported bit widths
  std::vector<int> group_sizes;  // supported group sizes (0 = per output channel)
  int default_bits;
  int default_group_size;
  bool flat_blocks;  // groups run over the flattened tensor (bitsandbytes)
  int col_align;     // the row length must be a multiple of this (codes packed across columns)
  KernelFamily kernel;
  // Where the kernels take the weight in another row's form (int4_ct: affine), that form; the
  // kernel family is then that row's. nullptr: the stored form.
  PackedTensor (*kernel_form)(PackedTensor w);
  GridRule grid;
  // The layouts that store it; the first is convert's default --format for it.
  std::vector<StoredAs> layouts;
  // GGUF holds weights only: no per-token activation quantization, a non-uniform 4-bit code table
  // only as iq4_nl.
  std::vector<GgufNearest> gguf;
  PackedLayout (*layout)(const SchemeParams& p, int64_t rows, int64_t cols);
  // Called with validated parameters and w already rounded to p.dtype.
  PackedTensor (*quantize)(const float* w, int64_t rows, int64_t cols, const SchemeParams& p);
  // out: rows*cols floats, row-major.
  void (*dequantize)(const PackedTensor& t, float* out);
  // nvfp4: the tensor-level scale of a whole weight (n values, rounded to p.dtype), which every
  // group's scale depends on. nullptr: none.
  float (*tensor_scale)(const float* w, int64_t n, const SchemeParams& p) = nullptr;
  // Dequantized rows with quantized activations (nvfp4_a4, mxfp4_a4): x [n_tokens, k] replaced by
  // its fake-quantized values, as compressed-tensors' forward rounds a Linear's input.
  void (*round_activations)(float* x, int64_t n_tokens, int64_t k) = nullptr;
  // Rows of the weight sharing one group's scale: 1 for every row-group scheme; fp8_block's
  // scales cover 128×128 blocks. The calibrated quantizers (grid.h) need 1.
  int block_rows = 1;
  // The weight as the row's Linear multiplies it where that differs from dequantize (the format's
  // decompressor): fp8_block's e4m3·s in fp32, as FP8 block GEMMs (and compressed-tensors' forward
  // in an fp32 model) scale without rounding the product to the weights' dtype. nullptr: dequantize.
  void (*kernel_values)(const PackedTensor& t, float* out) = nullptr;

  // W8A8 / W4A8: reference_gemm quantizes activations to int8 by default.
  bool int8_activations() const { return kernel == KernelFamily::Int8PerToken; }
  // Its kernels quantize activations per token (int8 or FP8): calibration that searches scales
  // measures the Linear itself rather than fake-quantized weights.
  bool quantizes_activations() const {
    return int8_activations() || kernel == KernelFamily::Fp8PerToken || round_activations != nullptr;
  }
};

// The table, in the order above.
const std::vector<Scheme>& scheme_table();
// The row named `name`; UserError listing the known names otherwise.
const Scheme& find_scheme(std::string_view name);
// Params for `name` with its default bits and group size; dtype F32.
SchemeParams default_params(std::string_view name);
// The row `scheme` is stored as in output layout `layout`; UserError listing what each layout
// stores when it does not store the row.
const Scheme& stored_row(std::string_view scheme, std::string_view layout);
// The GGUF type nearest to a row at `bits` (-1: its default).
const char* closest_gguf_type(const Scheme& s, int bits);
// The comma-separated names of the table's rows.
std::string scheme_names();

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
//  Fp8PerToken:  a[t,:], s_x[t] = quantize_activations_fp8(x); acc = Σ_k a[t,k]·e4m3(q[n,k]),
//                summed in double (exact: every product is a multiple of 2^-18 below 2^18) and
//                rounded to fp32 once; y = s_x[t] · (s_w[n] · acc) in fp32.
void reference_gemm(const PackedTensor& w, const float* x, int64_t n_tokens, float* y, ActMode mode = ActMode::Default);

// Per-token dynamic symmetric int8 (docs/spec/int8-w8a8.md, the W8A8/W4A8 activations): for
// each row of x [n_tokens, k]: s = absmax/127 in fp32 (1 for an all-zero row), inv = 1/s,
// q = clamp(rint(x·inv), −128, 127) with round-half-to-even (the multiply by the reciprocal is
// Cider's w8a8_quantize.metal; the rounding is torch.round's and cvtps2dq's).
void quantize_activations_int8(const float* x, int64_t n_tokens, int64_t k, int8_t* q, float* scales);

// Per-token dynamic FP8 E4M3 (the fp8 row's activations, compressed-tensors' token strategy with
// type "float" as its fake quantization computes it in fp32): for each row of x [n_tokens, k]:
// s = absmax/448 (fp32 division; 2^-23, fp32's eps, for an all-zero row), q = the E4M3 value of
// clamp(x/s, −448, 448) (true division, round to nearest even: e4m3.h), kept as fp32 (exact).
void quantize_activations_fp8(const float* x, int64_t n_tokens, int64_t k, float* q, float* scales);
// One token of the above: its values into q, its scale returned.
float quantize_token_fp8(const float* x, int64_t k, float* q);

// The nvfp4_a4 / mxfp4_a4 rows' activations, in place: each row of x [n_tokens, k] fake-quantized
// as compressed-tensors' forward does (nvfp4.cpp, mxfp4.cpp say how), k a multiple of the group.
void round_activations_nvfp4(float* x, int64_t n_tokens, int64_t k);
void round_activations_mxfp4(float* x, int64_t n_tokens, int64_t k);
// The fp8_block row's activations, in place: E4M3 fake quantization per group of 128 columns
// (quantize_token_fp8 of each group, times its scale), k a multiple of 128.
void round_activations_fp8_groups(float* x, int64_t n_tokens, int64_t k);

// int4_ct (compressed-tensors W4A16) as the affine 4-bit weight its kernels run (its row's
// kernel_form): the same codes (shared), fp32 scales s and biases −8·s.
PackedTensor int4_ct_as_affine(PackedTensor w);

// bitsandbytes' 4-bit code book ("nf4" or "fp4"), index = code; the P.weight.quant_map tensor.
std::span<const float, 16> bnb_code_table(std::string_view quant_type);

}  // namespace qt
