// The inner loop both AVX-512 VNNI GEMMs share (int8_vnni.cpp: VPDPBUSD on int8 quads;
// affine_i16_vnni.cpp: VPDPWSSD on int16 pairs): per k-step, NP weight vectors of 64 bytes (a
// panel's 16 output rows × one dword each) and R token dwords broadcast, R·NP accumulators. Its own
// function (not inlined into the tiles): inside a tile's group loop GCC 12 spilled and shuffled the
// accumulators every step; alone it keeps them in registers.
#pragma once
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

namespace qt::kernels {

enum class VnniDot { U8S8, S16S16 };  // VPDPBUSD (4 bytes per dword), VPDPWSSD (2 int16 per dword)

// Steps [s0, s1): weights at pan[q] + 64·s bytes, token row r's dword at a + r·lda + 4·s bytes.
template <VnniDot kDot, int R, int NP>
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) void vnni_group_sums(const uint8_t* const* pan,
                                                                                      const uint8_t* a, int64_t lda,
                                                                                      int64_t s0, int64_t s1,
                                                                                      int32_t* acc_out) {
  __m512i acc[R][NP];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) acc[r][q] = _mm512_setzero_si512();
  for (int64_t s = s0; s < s1; ++s) {
    __m512i wv[NP];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) wv[q] = _mm512_loadu_si512(pan[q] + s * 64);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t dw;
      std::memcpy(&dw, a + r * lda + s * 4, 4);
      const __m512i av = _mm512_set1_epi32(dw);
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) {
        if constexpr (kDot == VnniDot::U8S8)
          acc[r][q] = _mm512_dpbusd_epi32(acc[r][q], av, wv[q]);
        else
          acc[r][q] = _mm512_dpwssd_epi32(acc[r][q], av, wv[q]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) _mm512_store_si512(acc_out + (r * NP + q) * 16, acc[r][q]);
}

// Both GEMMs' dispatch table of tile instances: table[rows][panels] = make.operator()<rows,
// panels>() for rows 1..MR token rows and 1..NP panels; row 0 and column 0 are null.
template <class Fn, int MR, int NP>
using TileTable = std::array<std::array<Fn, NP + 1>, MR + 1>;
template <class Fn, int R, int NP, class Make, int... P>
constexpr std::array<Fn, NP + 1> tile_row(Make make, std::integer_sequence<int, P...>) {
  return {Fn{}, make.template operator()<R, P + 1>()...};
}
template <class Fn, int MR, int NP, class Make, int... R>
constexpr TileTable<Fn, MR, NP> tile_rows(Make make, std::integer_sequence<int, R...>) {
  return {std::array<Fn, NP + 1>{}, tile_row<Fn, R + 1, NP>(make, std::make_integer_sequence<int, NP>{})...};
}
template <class Fn, int MR, int NP, class Make>
constexpr TileTable<Fn, MR, NP> tile_table(Make make) {
  return tile_rows<Fn, MR, NP>(make, std::make_integer_sequence<int, MR>{});
}

}  // namespace qt::kernels
