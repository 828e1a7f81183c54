// GGUF reader. Mirrors the checks of ggml's gguf.cpp (gguf_init_from_file_impl; docs/spec/gguf.md
// §File layout to §Tensor types and sizes), but every failure is a UserError "PATH: problem"
// instead of a log line + nullptr.
// All reads go through Cursor, which bounds-checks against the buffer, so no input can make us
// read past the end; counts are checked against the bytes left before anything is allocated.
#include "formats/gguf.h"

#include <cstring>
#include <limits>
#include <set>

#include "formats/error.h"
#include "formats/mapped_file.h"

namespace qt {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint32_t kMaxVersion = 3;
constexpr uint64_t kMaxStringLength = uint64_t(1) << 30;  // ggml GGUF_MAX_STRING_LENGTH (1 GiB)
constexpr size_t kMaxNameLength = 64;                     // GGML_MAX_NAME (names must be shorter)
constexpr uint32_t kMaxDims = 4;                          // GGML_MAX_DIMS
constexpr uint32_t kDefaultAlignment = 32;                // GGUF_DEFAULT_ALIGNMENT

// Smallest encoded size of each item, to reject counts that cannot fit in the file before
// allocating anything for them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING: return 8;  // at least the length prefix
    default: return 0;
  }
}

bool is_int_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::BOOL: return true;
    default: return false;
  }
}
bool is_float_type(GgufValueType t) { return t == GgufValueType::FLOAT32 || t == GgufValueType::FLOAT64; }

// Bounds-checked little-endian reader over the whole file.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}

  size_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const char* what) const {
    if (n > remaining())
      user_error("{}: truncated: {} needs {} bytes at offset {}, file has {} left", name_, what, n, pos_, remaining());
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    uint64_t n = read<uint64_t>(what);
    if (n > kMaxStringLength)
      user_error("{}: {} has length {} (more than the 1 GiB limit) at offset {}", name_, what, n, pos_ - 8);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(n));
    pos_ += size_t(n);
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& name_;
};

int64_t read_int_as(Cursor& c, GgufValueType t, const char* what) {
  switch (t) {
    case GgufValueType::UINT8: return c.read<uint8_t>(what);
    case GgufValueType::INT8: return c.read<int8_t>(what);
    case GgufValueType::UINT16: return c.read<uint16_t>(what);
    case GgufValueType::INT16: return c.read<int16_t>(what);
    case GgufValueType::UINT32: return c.read<uint32_t>(what);
    case GgufValueType::INT32: return c.read<int32_t>(what);
    case GgufValueType::UINT64: return int64_t(c.read<uint64_t>(what));  // bit pattern
    case GgufValueType::INT64: return c.read<int64_t>(what);
    case GgufValueType::BOOL: return c.read<int8_t>(what) != 0 ? 1 : 0;  // ggml: any non-zero
    default: return 0;
  }
}
double read_float_as(Cursor& c, GgufValueType t, const char* what) {
  if (t == GgufValueType::FLOAT32) return c.read<float>(what);
  return c.read<double>(what);
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: return "UINT8";
    case GgufValueType::INT8: return "INT8";
    case GgufValueType::UINT16: return "UINT16";
    case GgufValueType::INT16: return "INT16";
    case GgufValueType::UINT32: return "UINT32";
    case GgufValueType::INT32: return "INT32";
    case GgufValueType::FLOAT32: return "FLOAT32";
    case GgufValueType::BOOL: return "BOOL";
    case GgufValueType::STRING: return "STRING";
    case GgufValueType::ARRAY: return "ARRAY";
    case GgufValueType::UINT64: return "UINT64";
    case GgufValueType::INT64: return "INT64";
    case GgufValueType::FLOAT64: return "FLOAT64";
  }
  return "?";
}

size_t GgufValue::array_size() const {
  if (type != GgufValueType::ARRAY) return 1;
  if (elem_type == GgufValueType::STRING) return as.size();
  if (is_float_type(elem_type)) return af.size();
  return ai.size();
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::vector<int64_t> GgufTensorInfo::torch_shape() const { return std::vector<int64_t>(ne.rbegin(), ne.rend()); }

GgufFile GgufFile::open(const std::string& path) {
  MappedFile mf = map_file(path);
  GgufFile f = parse(mf.data, mf.size, path);
  f.mapping_ = mf.owner;
  return f;
}

GgufFile GgufFile::parse(const uint8_t* data, size_t size, const std::string& name) {
  GgufFile f;
  f.path_ = name;
  f.file_size_ = size;
  Cursor c(data, size, f.path_);

  // Header.
  if (size < 4) user_error("{}: not a GGUF file: {} bytes, too short for the magic", name, size);
  uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kGgufMagic) {
    char m[5] = {0};
    for (int i = 0; i < 4; ++i) {
      char ch = char(data[i]);
      m[i] = (ch >= 32 && ch < 127) ? ch : '?';
    }
    user_error("{}: not a GGUF file: magic is '{}', expected 'GGUF'", name, m);
  }
  uint32_t version = c.read<uint32_t>("version");
  if (version == 0) user_error("{}: bad GGUF version 0", name);
  if ((version & 0xFFFF) == 0)
    user_error("{}: GGUF version field is {:#x}: a byte-swapped (big-endian) file, not supported", name, version);
  if (version == 1) user_error("{}: GGUF version 1 is no longer supported (need 2 or 3)", name);
  if (version > kMaxVersion) user_error("{}: GGUF version {} is not supported (need 2 or 3)", name, version);
  f.version_ = version;

  int64_t n_tensors = c.read<int64_t>("tensor count");
  int64_t n_kv = c.read<int64_t>("metadata count");
  if (n_tensors < 0 || uint64_t(n_tensors) > c.remaining() / kMinTensorInfoBytes)
    user_error("{}: header says {} tensors, which cannot fit in the {} bytes left", name, n_tensors, c.remaining());
  if (n_kv < 0 || uint64_t(n_kv) > c.remaining() / kMinKvBytes)
    user_error("{}: header says {} metadata entries, which cannot fit in the {} bytes left", name, n_kv, c.remaining());

  // Metadata.
  for (int64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("metadata key");
    if (key.empty()) user_error("{}: metadata entry {} has an empty key", name, i);
    if (f.kv_.count(key)) user_error("{}: duplicate metadata key '{}'", name, key);
    GgufValue v;
    uint32_t t = c.read<uint32_t>("metadata value type");
    if (t > uint32_t(GgufValueType::FLOAT64))
      user_error("{}: metadata key '{}' has unknown value type {}", name, key, t);
    v.type = GgufValueType(t);
    if (v.type == GgufValueType::ARRAY) {
      uint32_t et = c.read<uint32_t>("array element type");
      if (et == uint32_t(GgufValueType::ARRAY))
        user_error("{}: metadata key '{}' is an array of arrays (not supported, as in ggml)", name, key);
      if (et > uint32_t(GgufValueType::FLOAT64))
        user_error("{}: metadata key '{}' is an array of unknown type {}", name, key, et);
      v.elem_type = GgufValueType(et);
      uint64_t n = c.read<uint64_t>("array length");
      if (n > c.remaining() / scalar_size(v.elem_type))
        user_error("{}: metadata key '{}' has {} elements, which cannot fit in the {} bytes left", name, key, n,
                   c.remaining());
      if (v.elem_type == GgufValueType::STRING) {
        v.as.reserve(size_t(n));
        for (uint64_t k = 0; k < n; ++k) v.as.push_back(c.read_string("array string"));
      } else if (is_float_type(v.elem_type)) {
        v.af.resize(size_t(n));
        for (uint64_t k = 0; k < n; ++k) v.af[k] = read_float_as(c, v.elem_type, "array value");
      } else {
        v.ai.resize(size_t(n));
        for (uint64_t k = 0; k < n; ++k) v.ai[k] = read_int_as(c, v.elem_type, "array value");
      }
    } else if (v.type == GgufValueType::STRING) {
      v.s = c.read_string("metadata string");
    } else if (is_float_type(v.type)) {
      v.f = read_float_as(c, v.type, "metadata value");
    } else {
      v.i = read_int_as(c, v.type, "metadata value");
    }
    f.key_order_.push_back(key);
    f.kv_.emplace(std::move(key), std::move(v));
  }

  // Alignment: ggml reads general.alignment with gguf_get_val_u32 (asserts the type).
  if (auto it = f.kv_.find("general.alignment"); it != f.kv_.end()) {
    const GgufValue& v = it->second;
    if (v.type != GgufValueType::UINT32)
      user_error("{}: general.alignment has type {}, expected UINT32", name, gguf_value_type_name(v.type));
    uint64_t a = uint64_t(v.i);
    if (a == 0 || (a & (a - 1)) != 0) user_error("{}: general.alignment {} is not a power of two", name, a);
    f.alignment_ = uint32_t(a);
  } else {
    f.alignment_ = kDefaultAlignment;
  }

  // Tensor infos.
  std::set<std::string> names;
  f.tensors_.reserve(size_t(n_tensors));
  for (int64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo ti;
    ti.name = c.read_string("tensor name");
    if (ti.name.size() >= kMaxNameLength)
      user_error("{}: tensor {} has a name of {} bytes (the limit is {})", name, i, ti.name.size(), kMaxNameLength - 1);
    if (!names.insert(ti.name).second) user_error("{}: duplicate tensor name '{}'", name, ti.name);
    uint32_t n_dims = c.read<uint32_t>("tensor n_dims");
    if (n_dims > kMaxDims)
      user_error("{}: tensor '{}' has {} dimensions (at most {})", name, ti.name, n_dims, kMaxDims);
    ti.ne.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      ti.ne[d] = c.read<int64_t>("tensor dimension");
      if (ti.ne[d] < 0) user_error("{}: tensor '{}' dimension {} is negative ({})", name, ti.name, d, ti.ne[d]);
    }
    // Element count must be representable (ggml: < INT64_MAX).
    int64_t numel = 1;
    for (int64_t d : ti.ne) {
      if (d != 0 && numel > std::numeric_limits<int64_t>::max() / d)
        user_error("{}: tensor '{}' has too many elements", name, ti.name);
      numel *= d;
    }
    uint32_t type = c.read<uint32_t>("tensor type");
    const GgmlTypeRow* row = ggml_type_row(type);
    if (!row) user_error("{}: tensor '{}' has unknown ggml type {}", name, ti.name, type);
    ti.type = row->type;
    int64_t ne0 = n_dims ? ti.ne[0] : 1;
    if (ne0 % row->block_size != 0)
      user_error(
          "{}: tensor '{}' of type {} has {} elements per row, not a multiple of the block "
          "size {}",
          name, ti.name, row->name, ne0, row->block_size);
    uint64_t nblocks = uint64_t(numel) / uint64_t(row->block_size);
    if (nblocks > std::numeric_limits<uint64_t>::max() / uint64_t(row->type_size))
      user_error("{}: tensor '{}' is too large", name, ti.name);
    ti.nbytes = nblocks * uint64_t(row->type_size);
    ti.offset = c.read<uint64_t>("tensor offset");
    f.tensors_.push_back(std::move(ti));
  }

  // Data section: aligned start (only when there are tensors: vocab-only files end here).
  uint64_t data_start = c.pos();
  if (n_tensors > 0) {
    data_start = gguf_pad(data_start, f.alignment_);
    if (data_start > size)
      user_error("{}: truncated: data section would start at {} but the file has {} bytes", name, data_start, size);
  }
  f.data_offset_ = data_start;

  // Offsets must be sequential and aligned (ggml: offset == sum of padded previous sizes), and
  // every tensor's bytes must lie inside the file.
  uint64_t expect = 0;
  const uint64_t avail = size - data_start;
  for (auto& ti : f.tensors_) {
    if (ti.offset != expect) {
      if (ti.offset % f.alignment_ != 0)
        user_error("{}: tensor '{}' has offset {}, not a multiple of the alignment {} (expected {})", name, ti.name,
                   ti.offset, f.alignment_, expect);
      user_error(
          "{}: tensor '{}' has offset {}, expected {} (tensors must be sequential, without "
          "overlap or gaps)",
          name, ti.name, ti.offset, expect);
    }
    if (ti.nbytes > avail || ti.offset > avail - ti.nbytes)
      user_error(
          "{}: tensor '{}' data ({} bytes at offset {}) extends past the end of the file "
          "({} bytes of data)",
          name, ti.name, ti.nbytes, ti.offset, avail);
    ti.data = data + data_start + ti.offset;
    // Cannot overflow: nbytes <= avail <= size, plus an alignment of at most 2^31.
    expect += gguf_pad(ti.nbytes, f.alignment_);
  }
  return f;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  for (auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {
const GgufValue& lookup(const std::map<std::string, GgufValue>& kv, const std::string& path, const std::string& key) {
  auto it = kv.find(key);
  if (it == kv.end()) user_error("{}: missing metadata key '{}'", path, key);
  return it->second;
}
[[noreturn]] void wrong_type(const std::string& path, const std::string& key, const GgufValue& v, const char* want) {
  if (v.type == GgufValueType::ARRAY)
    user_error("{}: metadata key '{}' is an array of {}, expected {}", path, key, gguf_value_type_name(v.elem_type),
               want);
  user_error("{}: metadata key '{}' has type {}, expected {}", path, key, gguf_value_type_name(v.type), want);
}
}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = lookup(kv_, path_, key);
  if (v.type != GgufValueType::STRING) wrong_type(path_, key, v, "a string");
  return v.s;
}
int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = lookup(kv_, path_, key);
  if (!is_int_type(v.type)) wrong_type(path_, key, v, "an integer");
  return v.i;
}
double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = lookup(kv_, path_, key);
  if (is_float_type(v.type)) return v.f;
  if (is_int_type(v.type) && v.type != GgufValueType::BOOL) {
    if (v.type == GgufValueType::UINT64) return double(uint64_t(v.i));
    return double(v.i);
  }
  wrong_type(path_, key, v, "a number");
}
bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v = lookup(kv_, path_, key);
  if (!is_int_type(v.type)) wrong_type(path_, key, v, "a bool");
  return v.i != 0;
}
const std::vector<std::string>& GgufFile::get_string_array(const std::string& key) const {
  const GgufValue& v = lookup(kv_, path_, key);
  if (v.type != GgufValueType::ARRAY || v.elem_type != GgufValueType::STRING)
    wrong_type(path_, key, v, "an array of strings");
  return v.as;
}
const std::vector<int64_t>& GgufFile::get_int_array(const std::string& key) const {
  const GgufValue& v = lookup(kv_, path_, key);
  if (v.type != GgufValueType::ARRAY || !is_int_type(v.elem_type)) wrong_type(path_, key, v, "an array of integers");
  return v.ai;
}
const std::vector<double>& GgufFile::get_float_array(const std::string& key) const {
  const GgufValue& v = lookup(kv_, path_, key);
  if (v.type != GgufValueType::ARRAY || !is_float_type(v.elem_type)) wrong_type(path_, key, v, "an array of floats");
  return v.af;
}
std::string GgufFile::get_string_or(const std::string& key, const std::string& def) const {
  return has(key) ? get_string(key) : def;
}
int64_t GgufFile::get_int_or(const std::string& key, int64_t def) const { return has(key) ? get_int(key) : def; }
double GgufFile::get_float_or(const std::string& key, double def) const { return has(key) ? get_float(key) : def; }
bool GgufFile::get_bool_or(const std::string& key, bool def) const { return has(key) ? get_bool(key) : def; }

std::vector<float> GgufFile::dequantize(const GgufTensorInfo& t) const {
  const GgmlTypeRow* row = ggml_type_row(uint32_t(t.type));
  if (!row || !row->to_float)
    user_error("{}: tensor '{}' has type {}, which cannot be dequantized", path_, t.name, row ? row->name : "?");
  const size_t n = size_t(t.numel());
  const size_t nblocks = n / size_t(row->block_size);
  // Parsing guaranteed nbytes == nblocks * type_size inside the file; a tensor that is not ours
  // (made up by a caller) must not make us read past it either.
  if (!t.data || t.nbytes != uint64_t(nblocks) * uint64_t(row->type_size))
    user_error("{}: tensor '{}' has no valid data", path_, t.name);
  std::vector<float> out(n);
  if (n == 0) return out;
  ggml_dequantize(*row, t.data, out.data(), nblocks);
  return out;
}

}  // namespace qt
