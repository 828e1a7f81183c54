// GGUF reader (versions 2 and 3) over mmap. Format: ggml's docs/gguf.md and src/gguf.cpp
// (summary: docs/spec/gguf.md).
// Validates everything ggml's gguf.cpp validates; any violation is a UserError naming the file.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/ggml_blocks.h"

namespace qt {

enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12
};

// One metadata value. Scalars keep their type; arrays keep the element type and store their
// elements in the matching vector (ints widened to int64 / uint64 stored as int64 bit pattern,
// floats widened to double, strings as std::string).
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  GgufValueType elem_type = GgufValueType::UINT8;  // for ARRAY
  int64_t i = 0;                                   // integer and bool scalars
  double f = 0;                                    // float scalars
  std::string s;                                   // string scalar
  std::vector<int64_t> ai;                         // integer/bool arrays
  std::vector<double> af;                          // float arrays
  std::vector<std::string> as;                     // string arrays
  size_t array_size() const;
};

// "UINT32", "STRING", ... ("?" for an unknown id).
const char* gguf_value_type_name(GgufValueType t);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the contiguous dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping
  int64_t numel() const;
  // Shape in PyTorch/HF order (ne reversed).
  std::vector<int64_t> torch_shape() const;
};

class GgufFile {
 public:
  static GgufFile open(const std::string& path);  // mmap + parse + validate
  // Parse from memory (the fuzzer and tests); the buffer must outlive the object.
  static GgufFile parse(const uint8_t* data, size_t size, const std::string& name);

  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  uint32_t alignment() const { return alignment_; }
  // Byte offset of the data section from the start of the file, and the file size.
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }
  // Metadata keys in file order (metadata() is sorted by key).
  const std::vector<std::string>& key_order() const { return key_order_; }

  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  // Typed getters: throw UserError naming the file and key when missing or of the wrong kind.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;   // any integer type (and bool)
  double get_float(const std::string& key) const;  // float or integer types
  bool get_bool(const std::string& key) const;
  const std::vector<std::string>& get_string_array(const std::string& key) const;
  const std::vector<int64_t>& get_int_array(const std::string& key) const;
  const std::vector<double>& get_float_array(const std::string& key) const;
  // Defaults when absent.
  std::string get_string_or(const std::string& key, const std::string& def) const;
  int64_t get_int_or(const std::string& key, int64_t def) const;
  double get_float_or(const std::string& key, double def) const;
  bool get_bool_or(const std::string& key, bool def) const;

  // Dequantize a tensor to fp32 in ggml element order (row-major over torch_shape()).
  std::vector<float> dequantize(const GgufTensorInfo& t) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  std::vector<std::string> key_order_;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::shared_ptr<const void> mapping_;
};

}  // namespace qt
