#include "formats/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "formats/error.h"

namespace qt {

namespace {
struct DTypeRow {
  DType t;
  const char* name;
  int bits;
};
constexpr DTypeRow kDTypes[] = {
    {DType::F64, "F64", 64},  {DType::F32, "F32", 32},        {DType::F16, "F16", 16},        {DType::BF16, "BF16", 16},
    {DType::I64, "I64", 64},  {DType::I32, "I32", 32},        {DType::I16, "I16", 16},        {DType::I8, "I8", 8},
    {DType::U64, "U64", 64},  {DType::U32, "U32", 32},        {DType::U16, "U16", 16},        {DType::U8, "U8", 8},
    {DType::BOOL, "BOOL", 8}, {DType::F8_E4M3, "F8_E4M3", 8}, {DType::F8_E5M2, "F8_E5M2", 8},
};
}  // namespace

int dtype_bits(DType t) {
  for (auto& r : kDTypes)
    if (r.t == t) return r.bits;
  return 0;
}
const char* dtype_name(DType t) {
  for (auto& r : kDTypes)
    if (r.t == t) return r.name;
  return "?";
}
std::optional<DType> dtype_from_name(std::string_view s) {
  for (auto& r : kDTypes)
    if (s == r.name) return r.t;
  return std::nullopt;
}

Tensor Tensor::from_f32(std::vector<float> values, std::vector<int64_t> shape) {
  auto buf = std::make_shared<std::vector<float>>(std::move(values));
  Tensor t;
  t.dtype = DType::F32;
  t.shape = std::move(shape);
  t.data = reinterpret_cast<const uint8_t*>(buf->data());
  t.nbytes = buf->size() * sizeof(float);
  t.owner = buf;
  return t;
}

Tensor Tensor::owned_bytes(DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  auto buf = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = buf->data();
  t.nbytes = buf->size();
  t.owner = buf;
  return t;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while (!(mant & 0x400));
      mant &= 0x3ff;
      u = sign | (uint32_t(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  // Round-to-nearest-even, as numpy's astype(float16) does.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // overflow to inf
  if (ax < 0x38800000u) {                                 // subnormal or zero in half
    if (ax < 0x33000000u) return uint16_t(sign);          // < 2^-25 rounds to 0
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;  // 14 - (e - 127) + 9 ... gives mantissa >> (shift)
    uint32_t half_m = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_m & 1))) ++half_m;
    return uint16_t(sign | half_m);
  }
  uint32_t e = (ax >> 23) - 127 + 15;
  uint32_t m = ax & 0x7fffff;
  uint32_t h = (e << 10) | (m >> 13);
  uint32_t rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return uint16_t(sign | h);
}

namespace {
// Cloned for AVX2: the library is built for the baseline ISA, and convert and the model loaders
// widen every bf16 weight through this. An exact conversion: the same values either way.
__attribute__((target_clones("avx2", "default"))) void widen_bf16(const uint16_t* s, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(s[i]);
}
}  // namespace

Tensor materialize(const Tensor& t) {
  if (!t.deferred()) return t;
  Tensor r = (*t.produce)();
  if (r.dtype != t.dtype || r.shape != t.shape || r.nbytes != t.nbytes || (!r.data && r.nbytes))
    throw std::logic_error("a deferred tensor's producer made a tensor other than the one promised");
  return r;
}

Tensor deferred_tensor(DType dtype, std::vector<int64_t> shape, std::function<Tensor()> produce) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.nbytes = size_t((t.numel() * dtype_bits(dtype) + 7) / 8);
  t.produce = std::make_shared<const std::function<Tensor()>>(std::move(produce));
  return t;
}

void to_f32_range(const Tensor& t, size_t first, size_t n, float* out) {
  if (t.deferred()) return to_f32_range(materialize(t), first, n, out);
  if (first + n > size_t(t.numel())) user_error("values {}..{} outside a tensor of {}", first, first + n, t.numel());
  switch (t.dtype) {
    case DType::F32:
      if (n) std::memcpy(out, t.as<float>() + first, n * 4);
      break;
    case DType::F16: {
      const uint16_t* s = t.as<uint16_t>() + first;
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(s[i]);
      break;
    }
    case DType::BF16: widen_bf16(t.as<uint16_t>() + first, n, out); break;
    case DType::F64: {
      const double* s = t.as<double>() + first;
      for (size_t i = 0; i < n; ++i) out[i] = float(s[i]);
      break;
    }
    default: user_error("cannot convert a {} tensor to f32", dtype_name(t.dtype));
  }
}

std::vector<float> to_f32(const Tensor& t) {
  if (!is_float(t.dtype)) user_error("cannot convert a {} tensor to f32", dtype_name(t.dtype));
  std::vector<float> out(size_t(t.numel()));
  to_f32_range(t, 0, out.size(), out.data());
  return out;
}

void release_pages(const Tensor& t) {
  if (t.mapped) release_pages(t.data, t.nbytes);
}

void release_pages(const void* data, size_t nbytes) {
  if (!data || nbytes == 0) return;
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  // Only the pages wholly inside the tensor: its neighbours may share the first and last page.
  const uintptr_t lo = (uintptr_t(data) + page - 1) / page * page;
  const uintptr_t hi = (uintptr_t(data) + nbytes) / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace qt
