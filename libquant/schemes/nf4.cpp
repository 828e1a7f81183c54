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

const Bnb4Book& book() {
  static const Bnb4Book b(kNf4Table, kNf4Order);
  return b;
}

PackedTensor nf4_quantize(const float* w, int64_t rows, int64_t cols, const SchemeParams& p) {
  return bnb4_quantize(w, rows, cols, p, book());
}
void nf4_dequantize(const PackedTensor& t, float* out) { bnb4_dequantize(t, kNf4Table, out); }

GroupParams nf4_fit_rtn(const float* v, int64_t n, const SchemeParams&) { return bnb4_fit_rtn(v, n); }
int nf4_grid_code(float x, const GroupParams& g, const SchemeParams&) { return bnb4_grid_code(x, g.scale, book()); }
float nf4_value(int q, const GroupParams& g, const SchemeParams& p) {
  return bnb4_value(kNf4Table, q, g.scale, p.dtype);
}
void nf4_pack_row(const int16_t* q, int64_t cols, const SchemeParams&, uint8_t* dst) { bnb4_pack_row(q, cols, dst); }

}  // namespace

const float* nf4_table() { return kNf4Table; }

const Scheme kNf4 = {
    .name = "nf4",
    .summary = "bitsandbytes NF4: blockwise absmax (fp32) over the flattened tensor, NormalFloat codes",
    .bits = {4},
    .group_sizes = {64, 128},
    .default_bits = 4,
    .default_group_size = 64,
    .flat_blocks = true,
    .col_align = 1,
    .kernel = KernelFamily::CodeBook4,
    .kernel_form = nullptr,
    .grid = {GridKind::Table, 0, 15, 0.0f, kNf4Table, nf4_fit_rtn, nf4_grid_code, nf4_value, nf4_pack_row},
    .layouts = {{"bnb"}, {"native"}},
    .gguf = {{0, "iq4_nl"}},
    .layout = bnb4_layout,
    .quantize = nf4_quantize,
    .dequantize = nf4_dequantize,
};

}  // namespace qt::schemes_detail
