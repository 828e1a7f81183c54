#include "libquant/schemes/buffer_pool.h"

#include <algorithm>
#include <cstring>
#include <mutex>

namespace qt {

namespace {

constexpr size_t kPoolBytes = size_t(512) << 20;
// Small outputs (scales, small tensors) are cheap to allocate: not pooled.
constexpr size_t kMinPooled = size_t(1) << 20;

struct Pool {
  std::mutex mu;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> free;  // by capacity, ascending
  size_t bytes = 0;
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: buffers may come back during static destruction
  return *p;
}

void give_back(std::vector<uint8_t>* v) {
  Pool& p = pool();
  std::unique_ptr<std::vector<uint8_t>> owned(v);
  std::lock_guard<std::mutex> lock(p.mu);
  const size_t cap = owned->capacity();
  // Keep the largest buffers: drop the smallest until this one fits, or drop this one.
  while (p.bytes + cap > kPoolBytes && !p.free.empty() && p.free.front()->capacity() < cap) {
    p.bytes -= p.free.front()->capacity();
    p.free.erase(p.free.begin());
  }
  if (p.bytes + cap > kPoolBytes) return;
  auto at =
      std::lower_bound(p.free.begin(), p.free.end(), cap, [](const auto& b, size_t c) { return b->capacity() < c; });
  p.free.insert(at, std::move(owned));
  p.bytes += cap;
}

}  // namespace

std::shared_ptr<std::vector<uint8_t>> pooled_zero_buffer(size_t n) {
  if (n < kMinPooled) return std::make_shared<std::vector<uint8_t>>(n, 0);
  std::unique_ptr<std::vector<uint8_t>> v;
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    // The smallest free buffer that holds n, unless it is more than twice n (it would idle).
    auto at =
        std::lower_bound(p.free.begin(), p.free.end(), n, [](const auto& b, size_t c) { return b->capacity() < c; });
    if (at != p.free.end() && (*at)->capacity() <= 2 * n) {
      v = std::move(*at);
      p.bytes -= v->capacity();
      p.free.erase(at);
    }
  }
  if (v) {
    v->resize(n);
    std::memset(v->data(), 0, n);
  } else {
    v = std::make_unique<std::vector<uint8_t>>(n, 0);
  }
  return std::shared_ptr<std::vector<uint8_t>>(v.release(), give_back);
}

}  // namespace qt
