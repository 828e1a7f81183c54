// The full-precision tokens one quantized side (keys or values of one layer) keeps: per kv head
// a ring of the newest `cap` positions, position p in slot p mod cap. Older positions are not
// kept anywhere — their codes stand for them — so a side holds codes + at most `cap` tokens
// (quant_cache.cpp sizes cap to the side's largest full-precision window).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace qt::kv {

class TokenRing {
 public:
  TokenRing() = default;
  // `round_f16`: rows are rounded to fp16 on the way in (the cache's fp16 window).
  TokenRing(int heads, int dim, int64_t cap, bool round_f16);

  int64_t capacity() const { return cap_; }
  int64_t end() const { return end_; }                                 // positions pushed
  int64_t begin() const { return std::max<int64_t>(0, end_ - cap_); }  // the oldest still held
  void clear() { end_ = 0; }

  // Pushes positions end() … end()+n−1 from rows x[(i·heads + h)·dim + d] (the layout the model
  // hands the cache); only the newest `cap` of them stay when n > cap.
  void push(const float* x, int n);
  // Position p (begin() ≤ p < end()) of kv head h.
  const float* row(int h, int64_t p) const { return buf_.data() + (int64_t(h) * cap_ + p % cap_) * dim_; }

  // Positions [a, b) of kv head h (begin() ≤ a ≤ b ≤ end()) as at most two runs of consecutive
  // rows, in position order (the ring wraps at most once). Returns the number of runs.
  struct Run {
    const float* rows;
    int64_t first;  // position of rows[0]
    int n;
  };
  int runs(int h, int64_t a, int64_t b, Run out[2]) const;

 private:
  int heads_ = 0, dim_ = 0;
  int64_t cap_ = 0, end_ = 0;
  bool round_f16_ = true;
  std::vector<float> buf_;  // [head][cap][dim]
};

}  // namespace qt::kv
