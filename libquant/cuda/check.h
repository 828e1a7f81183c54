// Error checks for CUDA runtime and cuBLAS calls: a failed call is a bug or a broken device
// (std::runtime_error, exit 1) — except running out of device memory, which is the user's
// choice of model and --batch (UserError, exit 2): a smaller batch, or a model split over GPUs.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "formats/error.h"

namespace qt::cuda {

inline void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  if (e == cudaErrorMemoryAllocation)
    user_error(
        "GPU out of memory ({}); try a smaller --batch, or (eval-ppl) the layers over several GPUs: --device "
        "cuda:0,1",
        what);
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " +
                           what + " at " + file + ":" + std::to_string(line));
}
inline void check_cublas(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  if (s == CUBLAS_STATUS_ALLOC_FAILED) user_error("GPU out of memory in cuBLAS ({}); try a smaller --batch", what);
  throw std::runtime_error(std::string("cuBLAS error ") + cublasGetStatusName(s) + " in " + what + " at " + file + ":" +
                           std::to_string(line));
}

}  // namespace qt::cuda

#define QT_CUDA_CHECK(call) ::qt::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define QT_CUBLAS_CHECK(call) ::qt::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: the launch's own error (bad configuration), not the kernel's outcome.
#define QT_CUDA_LAUNCHED() ::qt::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
