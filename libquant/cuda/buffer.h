// DeviceBuffer: one cudaMalloc'ed array, freed with its owner; PinnedBuffer: the same in page-locked
// host memory (cudaMallocHost: asynchronous copies to and from the device).
#pragma once
#include <cstddef>
#include <utility>

#include "libquant/cuda/check.h"

namespace qt::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { resize(bytes); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
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
    if (bytes) QT_CUDA_CHECK(cudaMalloc(&p_, bytes));
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
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  void* p_ = nullptr;
  size_t n_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { release(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // Exactly `bytes` (contents lost when it reallocates).
  void resize(size_t bytes) {
    if (bytes == n_) return;
    release();
    if (bytes) QT_CUDA_CHECK(cudaMallocHost(&p_, bytes));
    n_ = bytes;
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return n_; }

 private:
  void release() {
    if (p_) cudaFreeHost(p_);
    p_ = nullptr;
    n_ = 0;
  }
  void* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace qt::cuda
