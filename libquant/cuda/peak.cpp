// bench --peak --device cuda (peak.cpp): cuBLASLt bf16 and int8 GEMMs of n³ on random operands (random, not
// zeros: zeros run faster), timed with events after warm-up (median of 10), and a 1 GiB
// device-to-device copy.
#include <algorithm>
#include <vector>

#include "libquant/cuda/backend.h"
#include "libquant/cuda/buffer.h"
#include "libquant/cuda/gemm_lt.h"
#include "libquant/cuda/ops.h"

namespace qt::cuda {
namespace {

template <typename F>
double median_ms(F&& f, cudaStream_t s) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  QT_CUDA_CHECK(cudaEventCreate(&a));
  QT_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < 10; ++i) {
    QT_CUDA_CHECK(cudaEventRecord(a, s));
    f();
    QT_CUDA_CHECK(cudaEventRecord(b, s));
    QT_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    QT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

GpuPeaks measure_peaks(int n) {
  device_info();  // UserError without a device
  GpuPeaks r;
  r.n = n;
  cudaStream_t s;
  QT_CUDA_CHECK(cudaStreamCreate(&s));
  const size_t nn = size_t(n) * n;
  DeviceBuffer a(nn * 2), b(nn * 2), c(nn * 4);
  // bf16 words: sign, exponent 0x3e–0x3f region (|v| in [2^-2, 2)), random mantissa
  fill_random(a.get<uint32_t>(), nn / 2, 1, 0x3f7f3f7fu, s);
  fill_random(b.get<uint32_t>(), nn / 2, 2, 0x3f7f3f7fu, s);
  GemmLt g;
  const double ms_bf16 = median_ms(
      [&] { g.run(a.get<__nv_bfloat16>(), n, n, b.get<__nv_bfloat16>(), n, c.get(), CUDA_R_32F, false, s); }, s);
  r.bf16_tflops = 2.0 * double(n) * n * n / (ms_bf16 * 1e-3) / 1e12;
  fill_random(a.get<uint32_t>(), nn / 4, 3, 0xffffffffu, s);
  fill_random(b.get<uint32_t>(), nn / 4, 4, 0xffffffffu, s);
  const double ms_i8 = median_ms([&] { g.run_i8(a.get<int8_t>(), n, n, b.get<int8_t>(), n, c.get<int32_t>(), s); }, s);
  r.int8_tops = 2.0 * double(n) * n * n / (ms_i8 * 1e-3) / 1e12;
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer x(bytes), y(bytes);
  const double ms_copy =
      median_ms([&] { QT_CUDA_CHECK(cudaMemcpyAsync(y.get(), x.get(), bytes, cudaMemcpyDeviceToDevice, s)); }, s);
  r.copy_gbps = 2.0 * double(bytes) / (ms_copy * 1e-3) / 1e9;
  QT_CUDA_CHECK(cudaStreamDestroy(s));
  return r;
}

}  // namespace qt::cuda
