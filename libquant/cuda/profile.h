// QT_CUDA_PROFILE=1: device time per stage of the forward (CUDA events between launches on the
// one stream), summed over the run and printed to stderr at exit — where eval-ppl's GPU time goes.
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

namespace qt::cuda {

// Whether QT_CUDA_PROFILE asks for the profile (set, non-empty, not "0"): the stage times below and
// the GEMMs' plan choices.
bool profile_requested();

class StageProfile {
 public:
  StageProfile();
  ~StageProfile();
  bool on() const { return on_; }
  // Closes the stage running since the last mark (named `name`) on stream s.
  void mark(const char* name, cudaStream_t s);
  void start(cudaStream_t s);  // opens the first stage
  void flush();                // waits and adds the marked intervals to the totals

 private:
  bool on_ = false;
  std::vector<std::pair<const char*, cudaEvent_t>> marks_;
  std::vector<cudaEvent_t> pool_;
  size_t used_ = 0;
  std::map<std::string, double> ms_;
  cudaEvent_t next(cudaStream_t s);
};

}  // namespace qt::cuda
