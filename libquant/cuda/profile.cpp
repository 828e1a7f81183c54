#include "libquant/cuda/profile.h"

#include <cstdio>
#include <cstdlib>

#include "libquant/cuda/check.h"

namespace qt::cuda {

bool profile_requested() {
  const char* e = std::getenv("QT_CUDA_PROFILE");
  return e && *e && std::string(e) != "0";
}

StageProfile::StageProfile() : on_(profile_requested()) {}

StageProfile::~StageProfile() {
  if (!on_) return;
  double total = 0;
  for (auto& [k, v] : ms_) total += v;
  std::fprintf(stderr, "cuda stage profile (device ms, summed over the run):\n");
  for (auto& [k, v] : ms_)
    std::fprintf(stderr, "  %-14s %10.1f ms  %5.1f%%\n", k.c_str(), v, total > 0 ? 100 * v / total : 0);
  std::fprintf(stderr, "  %-14s %10.1f ms\n", "total", total);
  for (cudaEvent_t e : pool_) cudaEventDestroy(e);
}

cudaEvent_t StageProfile::next(cudaStream_t s) {
  if (used_ == pool_.size()) {
    cudaEvent_t e;
    QT_CUDA_CHECK(cudaEventCreate(&e));
    pool_.push_back(e);
  }
  cudaEvent_t e = pool_[used_++];
  QT_CUDA_CHECK(cudaEventRecord(e, s));
  return e;
}

void StageProfile::start(cudaStream_t s) {
  if (on_) marks_.push_back({nullptr, next(s)});
}

void StageProfile::mark(const char* name, cudaStream_t s) {
  if (on_) marks_.push_back({name, next(s)});
}

void StageProfile::flush() {
  if (!on_ || marks_.empty()) return;
  QT_CUDA_CHECK(cudaEventSynchronize(marks_.back().second));
  for (size_t i = 1; i < marks_.size(); ++i) {
    if (!marks_[i].first) continue;  // a new start
    float ms = 0;
    QT_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[i - 1].second, marks_[i].second));
    ms_[marks_[i].first] += ms;
  }
  marks_.clear();
  used_ = 0;
}

}  // namespace qt::cuda
