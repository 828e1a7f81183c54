// FP4 (bitsandbytes): sign + 2-bit exponent + 1-bit mantissa codes, blockwise absmax (bnb4.cpp).
// Table: bitsandbytes.functional.get_4bit_type("fp4") = [0, 0.0625, 8, 12, 4, 6, 2, 3, 0, −0.0625,
// −8, …]/12 (docs/spec/bitsandbytes.md §Code tables); bit 3 is the sign, but code 8 holds +0.0, not
// −0.0 (bitsandbytes builds the table with 0 there; its dequantize gives +0 for code 8, which the
// bit-exact test sees). It is not monotone in the code, so quantization searches the sorted values
// and maps back through kFp4Order.
//
// kFp4Order is torch.argsort(table) as bitsandbytes 0.50.2 computes it on CPU
// (_get_4bit_quantize_bounds). +0 (code 0) and −0 (code 8) are equal and argsort (not stable)
// put code 0 first: so values in (−0.0026, 0] get code 0 and values in (0, 0.0026] get code 8
// ("−0"). Both dequantize to +0; only the packed bytes show it. Checked by the golden vectors.
#include "libquant/schemes/detail.h"

namespace qt::schemes_detail {
namespace {

constexpr float kFp4Table[16] = {
    0.0f,
    0.0052083334885537624f,
    0.6666666865348816f,
    1.0f,
    0.3333333432674408f,
    0.5f,
    0.1666666716337204f,
    0.25f,
    0.0f,
    -0.0052083334885537624f,
    -0.6666666865348816f,
    -1.0f,
    -0.3333333432674408f,
    -0.5f,
    -0.1666666716337204f,
    -0.25f,
};
constexpr uint8_t kFp4Order[16] = {11, 10, 13, 12, 15, 14, 9, 0, 8, 1, 6, 7, 4, 5, 2, 3};

}  // namespace

const float* fp4_table() { return kFp4Table; }

const Scheme kFp4 = Bnb4Scheme<kFp4Table, kFp4Order>::row(
    "fp4", "bitsandbytes FP4 (e2m1, normalised by 12): blockwise absmax (fp32) over the flattened tensor");

}  // namespace qt::schemes_detail
