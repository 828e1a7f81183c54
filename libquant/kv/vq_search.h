// Nearest-codeword search of one residual-VQ stage (CommVQ's encoder): for rows m = −2r,
//   best = argmin_c  ‖c‖² + Σ_i m_i·c_i
// with the score summed in float, in index order, multiply and add separate, ties to the lowest
// index — the same codes on every path and kernel level (the exhaustive tiled fp32 search is the
// definition; the AVX2 path only skips codewords it can prove are not the answer).
//
// The AVX2 path: 6-bit integer copies of the rows and codewords (per-row and per-codeword
// scales) give every codeword's score through VPMADDUBSW (32 multiply-adds an instruction) with
// a rigorous bound |approx − score| ≤ E(c) from ‖r − s_r·q_r‖·‖c‖ + s_r‖q_r‖·‖c − s_c·q_c‖ and
// the float roundings; codewords whose lower bound lies above the smallest upper bound are out.
// The few left (typically 1–5 of 256) get a vector fp32 dot product with its own rounding bound,
// and only when that cannot separate them is the exact index-order sum computed.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

namespace qt::kv {

class NearestCodeword {
 public:
  // C: k codewords × d, row-major, kept by pointer (it must outlive this object).
  NearestCodeword(const float* C, int k, int d);
  NearestCodeword(const NearestCodeword&) = delete;
  NearestCodeword& operator=(const NearestCodeword&) = delete;

  // How the last calls went (tests, profiling): rows searched, codewords that survived the
  // integer bound, rows that needed the exact index-order sums.
  struct Stats {
    int64_t rows = 0, candidates = 0, exact_rows = 0;
  };
  // best[t] for n rows m2 + t·d. Uses the integer prefilter where the kernel level has AVX2
  // (and k % 16 == 0, d % 32 == 0), the exhaustive search otherwise; the same codes either way.
  void search(const float* m2, int n, int* best, Stats* stats = nullptr) const;
  // Every codeword's fp32 score (the definition).
  void search_exhaustive(const float* m2, int n, int* best) const;

 private:
  const float* C_;
  int k_, d_;
  bool prefilter_;
  void prepare() const;  // the tables below, on the first search
  mutable std::once_flag prepared_;
  mutable std::vector<float> cn_;  // ‖c‖², float, summed in index order
  // the exhaustive search's layouts, made on its first call
  void make_exhaustive_layout() const;
  mutable std::once_flag layout_once_;
  mutable std::vector<float> ctile_;  // tiles of 16 codewords × d (k % 16 == 0)
  mutable std::vector<float> ct_;     // [d][k] (other k)
  // integer prefilter (k % 16 == 0, d % 32 == 0, an AVX2 CPU, finite codewords)
  mutable bool tables_ = false;
  mutable std::vector<int8_t> q8_;           // [c/8][i/4][c%8][i%4]: codewords as 6-bit integers
  mutable std::vector<float> sc_, nc_, ne_;  // per codeword: scale, ‖c‖ and ‖c − sc·q‖ (rounded up)
  mutable std::vector<int32_t> sq32_;        // 32·Σ_i q_i (the rows' +32 offset)
};

}  // namespace qt::kv
