// A 64-byte aligned, grow-only byte buffer (packed panels, per-call scratch).
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

namespace qt::kernels {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes) { reserve(bytes); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(p_); }

  // Ensures capacity for `bytes`; contents are not kept when it grows.
  void* reserve(size_t bytes) {
    if (bytes > cap_) {
      std::free(p_);
      size_t rounded = (bytes + 63) / 64 * 64;
      p_ = std::aligned_alloc(64, rounded);
      if (!p_) throw std::bad_alloc();
      cap_ = rounded;
    }
    return p_;
  }
  void* data() const { return p_; }
  size_t capacity() const { return cap_; }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace qt::kernels
