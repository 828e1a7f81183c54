// Choosing one storage type per tensor to meet a byte budget at the least estimated loss (the
// multiple-choice knapsack of mixed-precision allocation, as HAWQ-V3 / llama.cpp's community
// "target bpw" tools pose it): each tensor has candidates (bytes, loss), the losses add up
// across tensors, and the chosen bytes must sum to at most the budget.
//
// Solved by dynamic programming over the budget in units of ceil(budget / 2^17) bytes (each
// candidate's bytes rounded up, so the plan never exceeds the budget in real bytes), then the
// bytes the rounding left are spent greedily (the upgrade with the most loss saved per byte
// that still fits, repeated). Finally every uniform plan (candidate k of every tensor) that fits
// is compared and wins if its loss is lower, so the result is never worse than a single type.
#pragma once
#include <cstdint>
#include <vector>

namespace qt::calib {

struct TypeCandidate {
  uint64_t bytes = 0;
  double loss = 0;
};

struct TypeChoice {
  std::vector<int> pick;  // per tensor, the index of its chosen candidate
  uint64_t bytes = 0;
  double loss = 0;
};

// cands[i]: tensor i's candidates (at least one each). Empty pick when even the smallest
// candidates exceed `budget`.
TypeChoice choose_types(const std::vector<std::vector<TypeCandidate>>& cands, uint64_t budget);

}  // namespace qt::calib
