// A 64-byte aligned, grow-only byte buffer (packed panels, per-call scratch).
#pragma once
#include <sys/mman.h>

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
      // Weights streamed once a token (packed panels of MBs) go on 2 MiB pages where the kernel
      // allows (THP "madvise" mode): a page walk per 4 KiB of a 540 MB stream costs decode speed.
      // Only whole 2 MiB extents inside the allocation become huge pages, so a tail costs nothing.
      const bool huge = rounded >= kHugePage;
      if (posix_memalign(&p_, huge ? kHugePage : 64, rounded) != 0) {
        p_ = nullptr;
        throw std::bad_alloc();
      }
      if (huge) madvise(p_, rounded, MADV_HUGEPAGE);
      cap_ = rounded;
    }
    return p_;
  }
  void* data() const { return p_; }
  size_t capacity() const { return cap_; }

 private:
  static constexpr size_t kHugePage = size_t(2) << 20;
  void* p_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace qt::kernels
