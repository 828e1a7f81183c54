#include "libquant/kv/token_ring.h"

#include <cstring>
#include <stdexcept>

#include "formats/error.h"
#include "formats/tensor.h"

namespace qt::kv {

TokenRing::TokenRing(int heads, int dim, int64_t cap, bool round_f16)
    : heads_(heads), dim_(dim), cap_(cap), round_f16_(round_f16), buf_(size_t(heads) * size_t(cap) * size_t(dim)) {}

void TokenRing::push(const float* x, int n) {
  const int64_t first = end_;
  end_ += n;
  if (cap_ == 0) return;
  const int skip = int(std::max<int64_t>(0, n - cap_));  // rows pushed out within this push
  for (int h = 0; h < heads_; ++h)
    for (int i = skip; i < n; ++i) {
      const float* s = x + (int64_t(i) * heads_ + h) * dim_;
      float* d = buf_.data() + (int64_t(h) * cap_ + (first + i) % cap_) * dim_;
      if (round_f16_)
        for (int c = 0; c < dim_; ++c) d[c] = f16_to_f32(f32_to_f16(s[c]));
      else
        std::memcpy(d, s, sizeof(float) * size_t(dim_));
    }
}

int TokenRing::runs(int h, int64_t a, int64_t b, Run out[2]) const {
  if (a < begin() || b > end_ || a > b)
    throw std::logic_error(
        fmt::format("token ring: positions {}..{} asked, it holds {}..{}", a, b - 1, begin(), end_ - 1));
  if (a == b) return 0;
  const int64_t s = a % cap_, n = b - a;
  const int64_t first = std::min(n, cap_ - s);  // rows up to the end of the buffer
  out[0] = {row(h, a), a, int(first)};
  if (first == n) return 1;
  out[1] = {row(h, a + first), a + first, int(n - first)};
  return 2;
}

}  // namespace qt::kv
