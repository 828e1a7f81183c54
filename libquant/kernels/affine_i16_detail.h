// Shared between the int16 affine GEMM's driver (affine_i16_gemm.cpp) and its per-ISA tiles
// (affine_i16_vnni.cpp, affine_i16_avx2.cpp). Panels are 16 output rows; codes as int16 pairs,
// dword (q_2i, q_2i+1) of row r at pan[(p·k/2 + i)·16 + r]; scales and biases [p][group][16].
#pragma once
#include <cstdint>

namespace qt::kernels::i16 {

constexpr int kNP = 4;  // panels decoded per task (64 output rows)

struct TileArgs {
  const int32_t* pan;    // the tile's first decoded panel
  const float *st, *bt;  // its scales and biases [p][group][16]
  int64_t k, g;
  const int16_t* a;     // R token rows of x̃, stride k
  const float *d, *xs;  // [R][groups]: the tokens' int16 steps and group sums
  const float* bias;    // at the first panel's first row, or null
  float* y;             // at (first token, first row), stride ldy
  int64_t ldy;
  int last_cols;  // rows of the last panel that exist (1..16)
};

struct Isa {
  int mr;  // token rows per tile
  // One token: per group d = max|x| / 32767, x̃ = round-to-nearest-even(x / d) (as affine_gemv's
  // prepare), and the group sum X of x.
  void (*round_token)(const float* x, int64_t k, int64_t g, int16_t* q, float* d, float* xs);
  // rows (1..mr) tokens × np (1..kNP) panels.
  void (*tile)(const TileArgs& t, int rows, int np);
};

const Isa& isa_vnni();
const Isa& isa_avx2();

}  // namespace qt::kernels::i16
