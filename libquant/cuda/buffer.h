// DeviceBuffer: one cudaMalloc'ed array, freed with its owner; PinnedBuffer: the same in page-locked
// host memory (cudaMallocHost: asynchronous copies to and from the device). One class, the
// allocator and its free function as parameters.
#pragma once
#include <cstddef>
#include <utility>

#include "libquant/cuda/check.h"

namespace qt::cuda {

template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*)>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  explicit CudaBuffer(size_t bytes) { resize(bytes); }
  ~CudaBuffer() { release(); }
  CudaBuffer(CudaBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  // Exactly `bytes` (contents lost when it reallocates; kept when the size is the same).
  void resize(size_t bytes) {
    if (bytes == n_) return;
    release();
    if (bytes) QT_CUDA_CHECK(Alloc(&p_, bytes));
    n_ = bytes;
  }
  // At least `bytes` (grows only).
  void reserve(size_t bytes) {
    if (bytes > n_) resize(bytes);
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return n_; }

 private:
  void release() {
    if (p_) Free(p_);
    p_ = nullptr;
    n_ = 0;
  }
  void* p_ = nullptr;
  size_t n_ = 0;
};

using DeviceBuffer = CudaBuffer<cudaMalloc, cudaFree>;
using PinnedBuffer = CudaBuffer<cudaMallocHost, cudaFreeHost>;

}  // namespace qt::cuda
