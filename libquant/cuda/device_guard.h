// DeviceGuard: makes a device current for a scope and restores the one before (cudaSetDevice is
// per host thread). A pipeline stage's every CUDA call — allocations, launches, cuBLASLt handles —
// runs with the stage's device current: a launch onto another device's stream fails, and
// cudaMalloc allocates on whichever device is current.
#pragma once
#include <cuda_runtime.h>

#include "libquant/cuda/check.h"

namespace qt::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    QT_CUDA_CHECK(cudaGetDevice(&prev_));
    if (device != prev_) QT_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(prev_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};

}  // namespace qt::cuda
