// The --device argument of the GPU path: "cuda" (device 0), "cuda:N" (device N) or "cuda:A,B,…"
// (the model's layers split into pipeline stages, one a device in order; a device may repeat:
// "cuda:0,0" runs two stages on one GPU). Header-only: it parses in every build, and the CPU
// build's stub answers device_count() 0.
#pragma once
#include <string>
#include <vector>

#include "formats/error.h"
#include "libquant/cuda/backend.h"

namespace qt::cuda {

// Whether `spec` names the GPU path at all ("cuda" or "cuda:…"); the rest is cpu's or an error.
inline bool is_cuda_device(const std::string& spec) { return spec == "cuda" || spec.rfind("cuda:", 0) == 0; }

// The devices of `spec` (is_cuda_device), each checked against device_count(): UserError for a
// malformed list or a device the machine does not have.
inline std::vector<int> parse_device_list(const std::string& spec) {
  if (spec == "cuda") return {0};
  std::vector<int> out;
  const std::string list = spec.substr(5);
  size_t i = 0;
  while (true) {
    size_t j = i;
    while (j < list.size() && list[j] >= '0' && list[j] <= '9') ++j;
    if (j == i || j - i > 3) user_error("--device {}: want cuda, cuda:N or cuda:N,M,… (device numbers)", spec);
    out.push_back(std::stoi(list.substr(i, j - i)));
    if (j == list.size()) break;
    if (list[j] != ',') user_error("--device {}: want cuda, cuda:N or cuda:N,M,… (device numbers)", spec);
    i = j + 1;
  }
  const int n = device_count();
  for (int d : out)
    if (d >= n) user_error("--device {}: no CUDA device {} (this machine has {})", spec, d, n);
  return out;
}

}  // namespace qt::cuda
