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

// Write `bytes` to `path` atomically: a temporary name in the same folder, fsync, rename.
void write_file_atomic(const std::string& path, const void* bytes, size_t n);

}  // namespace qt
