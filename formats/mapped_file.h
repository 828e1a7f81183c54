// Read-only memory mapping of a whole file, shared by the safetensors and GGUF readers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace qt {

struct MappedFile {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;  // unmaps when the last holder goes
};

// UserError naming the path when it cannot be opened or is not a regular file.
MappedFile map_file(const std::string& path);

// Write `bytes` to `path` atomically: a temporary name in the same folder, (fsync,) rename.
void write_file_atomic(const std::string& path, const void* bytes, size_t n);

// write(2) until all n bytes are written (EINTR retried): 0, or the errno of the failed write.
int write_all(int fd, const void* bytes, size_t n);

// Whether the writers (safetensors, GGUF, write_file_atomic) fsync each file before renaming it
// into place: `convert --fsync`. Off by default, as in llama-quantize, mlx_lm and transformers'
// save_pretrained: a temporary name renamed into place already keeps a failed or interrupted
// write from leaving a half-written file under the real name, and waiting for the disk made an
// 8B-shaped int8 convert disk-bound (7.8 GB at ~0.4 GB/s) where `cp -r` is not.
void set_durable_writes(bool on);
bool durable_writes();

}  // namespace qt
