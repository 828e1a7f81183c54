// Reusable byte buffers for the quantizers' packed outputs. Convert quantizes a model's weights one
// after another and frees each once its shard is written; buffers fresh from the kernel cost page
// faults and page clearing (a third of an 8B int8 convert's time, perf), so freed ones are kept —
// up to 512 MiB in all, as few large ones — and handed out again, zeroed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace qt {

// n zero bytes; when the last holder lets go, the buffer returns to the pool (or is freed when
// the pool is full).
std::shared_ptr<std::vector<uint8_t>> pooled_zero_buffer(size_t n);

}  // namespace qt
