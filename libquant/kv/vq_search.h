// Nearest-codeword search of one residual-VQ stage (CommVQ's encoder): for rows m = −2r,
//   best = argmin_c  ‖c‖² + Σ_i m_i·c_i
// with the score summed in float, in index order, multiply and add separate, ties to the lowest
// index — the same codes on every kernel level.
//
// Tried and removed: an AVX2 integer prefilter (6-bit rows and codewords through
// VPMADDUBSW with a proven error bound, fp32 scores only for the codewords it could not rule out)
// found the same codes, and its integer sums ran 2.3× faster than these fp32 ones, but on this
// Zen 3 the bound's bookkeeping per codeword cost as much again: the whole search was no faster
// in a cache-mode run (1.84–2.45 vs 2.19–2.28 cpu-s of a 4-chunk run, perf, same binary).
#pragma once
#include <mutex>
#include <vector>

namespace qt::kv {

class NearestCodeword {
 public:
  // C: k codewords × d, row-major, kept by pointer (it must outlive this object).
  NearestCodeword(const float* C, int k, int d);
  NearestCodeword(const NearestCodeword&) = delete;
  NearestCodeword& operator=(const NearestCodeword&) = delete;

  // best[t] for n rows m2 + t·d.
  void search(const float* m2, int n, int* best) const;

 private:
  const float* C_;
  int k_, d_;
  void prepare() const;  // the tables below, on the first search
  mutable std::once_flag prepared_;
  mutable std::vector<float> cn_;     // ‖c‖², float, summed in index order
  mutable std::vector<float> ctile_;  // tiles of 16 codewords × d (k % 16 == 0)
  mutable std::vector<float> ct_;     // [d][k] (other k)
};

}  // namespace qt::kv
