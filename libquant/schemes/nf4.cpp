// NF4 (bitsandbytes): 4-bit NormalFloat code book, blockwise absmax (bnb4.cpp).
// Table: bitsandbytes.functional.get_4bit_type("nf4") (docs/spec/bitsandbytes.md §Code tables), as
// fp32; sorted, so the sorted position is the code.
#include "libquant/schemes/detail.h"

namespace qt::schemes_detail {
namespace {

constexpr float kNf4Table[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};
constexpr uint8_t kNf4Order[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

}  // namespace

const float* nf4_table() { return kNf4Table; }

const Scheme kNf4 = Bnb4Scheme<kNf4Table, kNf4Order>::row(
    "nf4", "bitsandbytes NF4: blockwise absmax (fp32) over the flattened tensor, NormalFloat codes");

}  // namespace qt::schemes_detail
