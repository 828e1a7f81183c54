// Tensor: a dtype, a shape and bytes, either owned or borrowed from a mapping that `owner`
// keeps alive. Shapes are in PyTorch/Hugging Face order (row-major, last dimension contiguous).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qt {

enum class DType : uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2 };

// Bits per element (safetensors dtype table; docs/spec/safetensors.md §Dtypes).
int dtype_bits(DType t);
// F64/F32/F16/BF16: a tensor of values rather than of packed codes.
inline bool is_float(DType t) { return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16; }
// The safetensors dtype string ("F32", "BF16", ...).
const char* dtype_name(DType t);
// Inverse of dtype_name; nullopt when unknown.
std::optional<DType> dtype_from_name(std::string_view s);

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::shared_ptr<const void> owner;  // keeps `data` alive (an mmap or an owned buffer)
  bool mapped = false;                // `data` lies in a read-only file mapping (release_pages)
  // A deferred tensor: dtype, shape and nbytes are known, `data` is null, and `produce` makes the
  // bytes when asked (materialize). Convert's streaming writer uses this so that a quantized or
  // cast tensor exists only while its part of a shard is written, never the whole model at once.
  std::shared_ptr<const std::function<Tensor()>> produce;

  bool deferred() const { return !data && produce; }

  int64_t numel() const { return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>()); }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data);
  }

  // A tensor owning a fresh copy of `n` values.
  static Tensor from_f32(std::vector<float> values, std::vector<int64_t> shape);
  static Tensor owned_bytes(DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
};

// The tensor with its bytes: `t` itself unless deferred, else what its producer makes (checked
// against the promised dtype, shape and nbytes: a mismatch is a bug, std::logic_error).
Tensor materialize(const Tensor& t);
// A deferred tensor of `dtype` and `shape` whose bytes `produce` makes.
Tensor deferred_tensor(DType dtype, std::vector<int64_t> shape, std::function<Tensor()> produce);

// A mapped tensor's pages leave this process's resident set (madvise MADV_DONTNEED on the whole
// pages inside its bytes); the data stays valid and is read from the page cache again if touched.
// For a loader that has copied or repacked the tensor: without this, the source pages it read stay
// resident beside the copy until the file is unmapped. No effect on owned tensors.
void release_pages(const Tensor& t);
void release_pages(const void* mapped_data, size_t nbytes);  // the same for bytes of a mapping

// Convert any float tensor (F32/F16/BF16/F64) to a vector of float (a deferred one is made first).
std::vector<float> to_f32(const Tensor& t);
// Values [first, first + n) of a float tensor as fp32 into `out` (one row, one panel's rows).
void to_f32_range(const Tensor& t, size_t first, size_t n, float* out);

// IEEE half / bfloat16 conversions (round-to-nearest-even on the way down, as numpy/torch do).
// "[a, b, c]": a shape in messages.
std::string shape_text(const std::vector<int64_t>& shape);

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
// Inline: the quantizers round every weight through it (it vectorizes where inlined).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

}  // namespace qt
