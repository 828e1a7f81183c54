// GPTQ's packed results, kept until the writer reaches them in an unlinked temporary file mapped
// back read-only: an 8B model's codes (4–8 GB) then sit in the page cache, which the kernel may
// write out and drop, not in the process's anonymous memory. Calibrating a model bigger than
// memory holds one block's weights and Hessians at a time (sequential.h); without this the
// finished blocks would pile up until the shards are written.
#pragma once
#include <cstdint>
#include <string>

#include "libquant/schemes/scheme.h"

namespace qt::calib {

class PackedSpill {
 public:
  // A temporary file in `dir` (TMPDIR, else /tmp, when empty), unlinked at once: nothing is left
  // behind however the process ends. UserError (one line) when it cannot be made.
  explicit PackedSpill(const std::string& dir = "");
  ~PackedSpill();
  PackedSpill(const PackedSpill&) = delete;
  PackedSpill& operator=(const PackedSpill&) = delete;

  // p with its buffers (codes, scales, biases) moved to the file and read from there. UserError
  // when the disk is full.
  PackedTensor keep(const PackedTensor& p);
  int64_t bytes() const { return end_; }

 private:
  Tensor spill(const Tensor& t);
  int fd_ = -1;
  int64_t end_ = 0;  // page-aligned end of the data written so far
  std::string dir_;
};

}  // namespace qt::calib
