// GGUF v3 writer (the reverse of formats/gguf.h; docs/spec/gguf.md): metadata in the order it
// is added, tensor infos, then the data section, every tensor at a 32-byte aligned offset.
// Tensors are produced one at a time while the file is written (a deferred source is
// dequantized, permuted and quantized only when its turn comes), so memory holds one tensor's
// bytes, not the model's. The file is written under a temporary name beside the target and
// renamed into place at the end; on any error the temporary is removed and nothing is left.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/ggml_blocks.h"

namespace qt {

class GgufWriter {
 public:
  // Metadata (keys must be unique; a duplicate is a bug, std::logic_error).
  void add_string(const std::string& key, const std::string& v);
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);

  // A tensor of `type` with ggml dimensions `ne` (ne[0] contiguous, a multiple of the type's
  // block size). `produce` returns its bytes when the writer reaches it; a wrong byte count is a
  // bug (std::logic_error).
  void add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                  std::function<std::vector<uint8_t>()> produce);

  size_t n_tensors() const { return tensors_.size(); }
  // Write the file at `path` (temporary + rename). UserError on an I/O failure; whatever
  // `produce` throws propagates after the temporary is removed.
  void write(const std::string& path) const;

  static constexpr uint32_t kAlignment = 32;  // GGUF_DEFAULT_ALIGNMENT (no general.alignment key)

 private:
  struct TensorEntry {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    uint64_t nbytes;
    std::function<std::vector<uint8_t>()> produce;
  };
  void key(const std::string& k, uint32_t type);
  std::string kv_;  // serialized key/value pairs, in order
  std::vector<std::string> keys_;
  std::vector<TensorEntry> tensors_;
};

}  // namespace qt
