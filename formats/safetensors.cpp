// safetensors reader and writer. The rules below mirror huggingface/safetensors
// safetensors/src/tensor.rs (SafeTensors::read_metadata, Metadata::validate, prepare) at 24b0b28,
// and its JSON parser's (serde_json) behaviour where that decides what is accepted.
#include "formats/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "formats/mapped_file.h"

namespace qt {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kMaxHeader = 100'000'000;  // tensor.rs MAX_HEADER_SIZE
constexpr int kMaxJsonDepth = 127;            // serde_json's recursion limit (128) fails the 128th

// Every dtype the reference knows, in its enum order ("increasing alignment": the writer sorts
// by this rank, descending), with bits per element and our DType when we have one.
struct StDType {
  const char* name;
  int bits;
  std::optional<DType> qt;
};
const StDType kStDTypes[] = {
    {"BOOL", 8, DType::BOOL},
    {"F4", 4, std::nullopt},
    {"F6_E2M3", 6, std::nullopt},
    {"F6_E3M2", 6, std::nullopt},
    {"U8", 8, DType::U8},
    {"I8", 8, DType::I8},
    {"F8_E5M2", 8, DType::F8_E5M2},
    {"F8_E4M3", 8, DType::F8_E4M3},
    {"F8_E8M0", 8, std::nullopt},
    {"F8_E4M3FNUZ", 8, std::nullopt},
    {"F8_E5M2FNUZ", 8, std::nullopt},
    {"I16", 16, DType::I16},
    {"U16", 16, DType::U16},
    {"F16", 16, DType::F16},
    {"BF16", 16, DType::BF16},
    {"I32", 32, DType::I32},
    {"U32", 32, DType::U32},
    {"F32", 32, DType::F32},
    {"C64", 64, std::nullopt},
    {"F64", 64, DType::F64},
    {"I64", 64, DType::I64},
    {"U64", 64, DType::U64},
};
constexpr int kNumStDTypes = int(sizeof(kStDTypes) / sizeof(kStDTypes[0]));

int st_rank_of_name(const std::string& s) {
  for (int i = 0; i < kNumStDTypes; ++i)
    if (s == kStDTypes[i].name) return i;
  return -1;
}
int st_rank(DType t) {
  for (int i = 0; i < kNumStDTypes; ++i)
    if (kStDTypes[i].qt == t) return i;
  return -1;
}

// Strict UTF-8 (as Rust's str::from_utf8: no overlongs, no surrogates, <= U+10FFFF).
// Returns the offset of the first invalid byte, or n when valid.
size_t utf8_invalid_at(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (n - i < len) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return n;
}

std::string clip(std::string s, size_t n = 160) {
  if (s.size() > n) {
    s.resize(n);
    s.append("...");
  }
  return s;
}

// A printable, bounded rendering of a name for error messages.
std::string q(const std::string& name) { return fmt::format("'{}'", clip(name, 120)); }

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

struct ParseAbort {
  std::string msg;
};

// Parse the header as the reference's serde_json would accept it: the DOM parser plus the few
// things serde rejects that nlohmann would let through (nesting past the recursion limit, a
// number too large for f64, a duplicated `__metadata__` or tensor-info field, a leading BOM).
json parse_header(const uint8_t* h, size_t n, const std::string& name) {
  if (n >= 3 && h[0] == 0xEF && h[1] == 0xBB && h[2] == 0xBF)
    user_error("{}: header is not valid JSON: starts with a byte-order mark", name);
  // nlohmann's lexer takes a NUL byte for the end of input (and ignores what follows); raw NUL
  // is never valid JSON text (not whitespace, not allowed unescaped in strings).
  if (const void* z = std::memchr(h, 0, n))
    user_error("{}: header is not valid JSON: NUL byte at header byte {}", name, static_cast<const uint8_t*>(z) - h);
  int meta_count = 0;
  std::string top_key;              // the current top-level key
  std::set<std::string> info_keys;  // known fields seen in the current tensor info
  auto cb = [&](int depth, json::parse_event_t ev, json& v) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth + 1 > kMaxJsonDepth) throw ParseAbort{fmt::format("nested deeper than {} levels", kMaxJsonDepth)};
        if (depth == 1) info_keys.clear();
        break;
      case json::parse_event_t::key:
        if (depth == 1) {
          top_key = v.get<std::string>();
          if (top_key == "__metadata__" && ++meta_count > 1) throw ParseAbort{"duplicate key '__metadata__'"};
        } else if (depth == 2 && top_key != "__metadata__") {
          const auto& k = v.get_ref<const std::string&>();
          if ((k == "dtype" || k == "shape" || k == "data_offsets") && !info_keys.insert(k).second)
            throw ParseAbort{fmt::format("tensor {}: duplicate field '{}'", q(top_key), k)};
        }
        break;
      case json::parse_event_t::value:
        if (v.is_number_float() && !std::isfinite(v.get<double>())) throw ParseAbort{"number out of range"};
        break;
      default: break;
    }
    return true;
  };
  try {
    return json::parse(h, h + n, cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const ParseAbort& e) {
    user_error("{}: header is not valid JSON: {}", name, e.msg);
  } catch (const json::exception& e) {
    user_error("{}: header is not valid JSON: {}", name, clip(e.what(), 200));
  }
}

uint64_t get_u64(const json& v, const std::string& name, const std::string& tensor, const char* field) {
  // serde's usize accepts only non-negative integers written without fraction or exponent
  // (serde_json reads "-0" and "2.0" as floats); nlohmann marks exactly those as unsigned.
  if (!v.is_number_unsigned())
    user_error("{}: tensor {}: {} must hold non-negative integers, got {}", name, q(tensor), field, clip(v.dump(), 40));
  return v.get<uint64_t>();
}

struct Entry {
  std::string name;
  int st;  // index into kStDTypes
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

}  // namespace

SafetensorsFile SafetensorsFile::parse(const uint8_t* data, size_t n, const std::string& name,
                                       std::shared_ptr<const void> owner) {
  if (n < 8) user_error("{}: file too short for a safetensors header ({} bytes, need 8)", name, n);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | data[i];
  if (hlen > kMaxHeader) user_error("{}: header length {} exceeds the {}-byte limit", name, hlen, kMaxHeader);
  if (hlen > n - 8) user_error("{}: header length {} runs past the end of the file ({} bytes)", name, hlen, n);
  const uint8_t* h = data + 8;
  if (size_t bad = utf8_invalid_at(h, hlen); bad != hlen)
    user_error("{}: header is not valid UTF-8 (byte {} of the header)", name, bad);
  json j = parse_header(h, hlen, name);
  if (!j.is_object()) user_error("{}: header is not a JSON object", name);

  SafetensorsFile f;
  f.path_ = name;
  f.data_start_ = 8 + size_t(hlen);
  const uint64_t buf_len = n - f.data_start_;

  std::vector<Entry> entries;
  entries.reserve(j.size());
  for (auto& [key, v] : j.items()) {
    if (key == "__metadata__") {
      if (v.is_null()) continue;  // serde reads null as an absent Option
      if (!v.is_object()) user_error("{}: __metadata__ is not an object of strings", name);
      for (auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) user_error("{}: __metadata__ value of {} is not a string", name, q(mk));
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) user_error("{}: tensor {}: entry is not an object", name, q(key));
    Entry e;
    e.name = key;
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end()) user_error("{}: tensor {}: missing dtype", name, q(key));
    if (sh == v.end()) user_error("{}: tensor {}: missing shape", name, q(key));
    if (off == v.end()) user_error("{}: tensor {}: missing data_offsets", name, q(key));
    if (!dt->is_string()) user_error("{}: tensor {}: dtype is not a string", name, q(key));
    e.st = st_rank_of_name(dt->get_ref<const std::string&>());
    if (e.st < 0) user_error("{}: tensor {}: unknown dtype {}", name, q(key), clip(dt->dump(), 40));
    if (!sh->is_array()) user_error("{}: tensor {}: shape is not an array", name, q(key));
    for (auto& d : *sh) {
      uint64_t x = get_u64(d, name, key, "shape");
      // The reference allows any usize; a Tensor holds int64 dims, so larger ones are refused.
      if (x > uint64_t(std::numeric_limits<int64_t>::max()))
        user_error("{}: tensor {}: shape dimension {} is too large", name, q(key), x);
      e.shape.push_back(int64_t(x));
    }
    if (!off->is_array() || off->size() != 2)
      user_error("{}: tensor {}: data_offsets is not a [begin, end] pair", name, q(key));
    e.begin = get_u64((*off)[0], name, key, "data_offsets");
    e.end = get_u64((*off)[1], name, key, "data_offsets");
    entries.push_back(std::move(e));
  }

  // Metadata::try_from sorts by data_offsets; ties (empty tensors) broken by name here.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });

  // Metadata::validate: contiguous from 0, END >= BEGIN, size = numel * bits / 8 (checked).
  uint64_t pos = 0;
  for (const Entry& e : entries) {
    if (e.end < e.begin)
      user_error("{}: tensor {}: data_offsets [{}, {}] end before they begin", name, q(e.name), e.begin, e.end);
    if (e.begin > pos)
      user_error("{}: tensor {}: data_offsets [{}, {}] leave a gap after byte {}", name, q(e.name), e.begin, e.end,
                 pos);
    if (e.begin < pos)
      user_error("{}: tensor {}: data_offsets [{}, {}] overlap the previous tensor, which ends at {}", name, q(e.name),
                 e.begin, e.end, pos);
    if (e.end > buf_len)
      user_error("{}: tensor {}: data_offsets [{}, {}] run past the end of the data buffer ({} bytes)", name, q(e.name),
                 e.begin, e.end, buf_len);
    pos = e.end;
    // Element count with overflow checks in the same order as the reference's checked fold,
    // but within int64 (Tensor::numel's type).
    int64_t numel = 1;
    for (int64_t d : e.shape)
      if (__builtin_mul_overflow(numel, d, &numel))
        user_error("{}: tensor {}: shape {} overflows", name, q(e.name), shape_str(e.shape));
    uint64_t nbits;
    if (__builtin_mul_overflow(uint64_t(numel), uint64_t(kStDTypes[e.st].bits), &nbits))
      user_error("{}: tensor {}: shape {} overflows", name, q(e.name), shape_str(e.shape));
    if (nbits % 8 != 0)
      user_error("{}: tensor {}: {} elements of {} do not end on a byte boundary", name, q(e.name), numel,
                 kStDTypes[e.st].name);
    if (e.end - e.begin != nbits / 8)
      user_error("{}: tensor {}: dtype {} shape {} needs {} bytes but data_offsets [{}, {}] hold {}", name, q(e.name),
                 kStDTypes[e.st].name, shape_str(e.shape), nbits / 8, e.begin, e.end, e.end - e.begin);
  }
  if (pos != buf_len)
    user_error("{}: tensors cover {} bytes but the data buffer has {} (trailing bytes)", name, pos, buf_len);

  for (Entry& e : entries) {
    const StDType& st = kStDTypes[e.st];
    if (!st.qt)
      user_error("{}: tensor {}: dtype {} is valid safetensors but not supported by quanttool", name, q(e.name),
                 st.name);
    Tensor t;
    t.dtype = *st.qt;
    t.shape = std::move(e.shape);
    t.data = data + f.data_start_ + e.begin;
    t.nbytes = size_t(e.end - e.begin);
    t.owner = owner;
    f.names_.push_back(e.name);
    f.tensors_.emplace(e.name, std::move(t));
  }
  return f;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  MappedFile m = map_file(path);
  SafetensorsFile f = parse(m.data, m.size, path, m.owner);
  for (auto& [name, t] : f.tensors_) t.mapped = true;  // views into the file mapping
  return f;
}

const Tensor& SafetensorsFile::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) user_error("{}: no tensor named {}", path_, q(name));
  return it->second;
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

// serde_json's string escaping: ", \, and control characters; everything else (UTF-8
// included) verbatim. The Python library takes str keys, which are always valid UTF-8.
void json_string(std::string& out, const std::string& s, const std::string& path) {
  if (utf8_invalid_at(reinterpret_cast<const uint8_t*>(s.data()), s.size()) != s.size())
    user_error("{}: name or metadata {} is not valid UTF-8", path, q(s));
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

std::string build_header(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                         std::vector<size_t>* order, const std::string& path) {
  std::set<std::string> seen;
  for (auto& [name, t] : tensors) {
    if (name == "__metadata__") user_error("{}: a tensor cannot be named __metadata__", path);
    if (!seen.insert(name).second) user_error("{}: tensor {} given twice", path, q(name));
    if (st_rank(t.dtype) < 0)
      user_error("{}: tensor {}: dtype {} has no safetensors name", path, q(name), dtype_name(t.dtype));
    int64_t numel = 1;
    for (int64_t d : t.shape)
      if (d < 0 || __builtin_mul_overflow(numel, d, &numel))
        user_error("{}: tensor {}: invalid shape {}", path, q(name), shape_str(t.shape));
    uint64_t need = uint64_t(numel) * uint64_t(dtype_bits(t.dtype)) / 8;
    if (t.nbytes != need)
      user_error("{}: tensor {}: {} bytes, but dtype {} shape {} needs {}", path, q(name), t.nbytes,
                 dtype_name(t.dtype), shape_str(t.shape), need);
    if (t.nbytes && !t.data && !t.deferred()) user_error("{}: tensor {}: no data", path, q(name));
  }
  // prepare(): dtype rank descending, then name ascending (byte order, as Rust's String Ord).
  order->resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) (*order)[i] = i;
  std::sort(order->begin(), order->end(), [&](size_t a, size_t b) {
    int ra = st_rank(tensors[a].second.dtype), rb = st_rank(tensors[b].second.dtype);
    if (ra != rb) return ra > rb;
    return tensors[a].first < tensors[b].first;
  });

  // serde_json::to_string(&Metadata): compact, __metadata__ first (our map: sorted keys; the
  // reference's HashMap order is arbitrary), then tensors in data order, fields in struct order.
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool mfirst = true;
    for (auto& [k, v] : metadata) {
      if (!mfirst) h += ',';
      mfirst = false;
      json_string(h, k, path);
      h += ':';
      json_string(h, v, path);
    }
    h += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (size_t i : *order) {
    auto& [name, t] = tensors[i];
    if (!first) h += ',';
    first = false;
    json_string(h, name, path);
    h += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[", dtype_name(t.dtype));
    h += fmt::format("{}],\"data_offsets\":[{},{}]}}", fmt::join(t.shape, ","), offset, offset + t.nbytes);
    offset += t.nbytes;
  }
  h += '}';
  h.resize((h.size() + 7) / 8 * 8, ' ');  // "Force alignment to 8 bytes"
  if (h.size() > kMaxHeader)
    user_error("{}: header would be {} bytes, over the {}-byte limit", path, h.size(), kMaxHeader);
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xff);
  return out + h;
}

std::atomic<uint64_t> g_tmp_counter{0};

// Streams header + tensor bytes to a temporary file beside `path`; returns the temporary name.
// Removes the temporary on failure.
fs::path write_temp(const std::string& path, const NamedTensors& tensors,
                    const std::map<std::string, std::string>& metadata) {
  std::vector<size_t> order;
  std::string header = build_header(tensors, metadata, &order, path);  // validates first

  fs::path p(path);
  fs::path tmp =
      p.parent_path() / fmt::format(".{}.tmp-{}-{}", p.filename().string(), getpid(), g_tmp_counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) user_error("{}: cannot create {}: {}", path, tmp.string(), std::strerror(errno));
  bool open_fd = true;
  auto fail = [&](const char* what, int e) {
    open_fd = false;
    ::close(fd);
    std::error_code ec;
    fs::remove(tmp, ec);
    user_error("{}: {}: {}", path, what, std::strerror(e));
  };
  auto put = [&](const uint8_t* b, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd, b, std::min<size_t>(n, size_t(1) << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("write failed", errno);
      }
      b += w;
      n -= size_t(w);
    }
  };
  put(reinterpret_cast<const uint8_t*>(header.data()), header.size());
  // Deferred tensors (convert's quantized and cast ones) are made a batch at a time in file
  // order, one tensor per thread, written, and dropped: the process holds at most about
  // kBatchBytes of output plus each thread's working set, never the whole file. A batch of one
  // tensor is made outside the parallel loop so that the producer's own loops get every thread.
  constexpr uint64_t kBatchBytes = 256ull << 20;
  // A made batch is written by a second thread while the next one is made: copying it into the
  // page cache is a third of an int8 convert's CPU time, and on two cores it then overlaps the
  // quantizing instead of following it. At most two batches are held.
  std::thread writer;
  std::exception_ptr write_error;
  auto wait_writer = [&] {
    if (writer.joinable()) writer.join();
    if (write_error) std::rethrow_exception(std::exchange(write_error, nullptr));
  };
  uint64_t written = header.size();
  try {
    for (size_t i = 0; i < order.size();) {
      size_t j = i;
      uint64_t bytes = 0;
      while (j < order.size() && (j == i || bytes + tensors[order[j]].second.nbytes <= kBatchBytes))
        bytes += tensors[order[j++]].second.nbytes;
      std::vector<Tensor> made(j - i);
      if (j - i == 1) {
        made[0] = materialize(tensors[order[i]].second);
      } else {
        std::vector<std::exception_ptr> errors(j - i);
#pragma omp parallel for schedule(dynamic, 1)
        for (size_t k = 0; k < j - i; ++k) {
          try {
            made[k] = materialize(tensors[order[i + k]].second);
          } catch (...) {
            errors[k] = std::current_exception();
          }
        }
        for (auto& e : errors)
          if (e) std::rethrow_exception(e);
      }
      wait_writer();  // the previous batch is on its way to the disk before this one follows it
      writer = std::thread([&, made = std::move(made), at = written, bytes]() mutable {
        try {
          for (Tensor& t : made) {
            put(t.data, t.nbytes);
            release_pages(t);  // a tensor written straight from the source mapping
            t = Tensor{};      // its memory goes back as soon as it is written
          }
          // With --fsync, start the disk writing this batch now (asynchronously), so that the
          // fsync at the end waits for the last batch only, not the whole shard.
          if (durable_writes()) ::sync_file_range(fd, off_t(at), off_t(bytes), SYNC_FILE_RANGE_WRITE);
        } catch (...) {
          write_error = std::current_exception();
        }
      });
      written += bytes;
      i = j;
    }
    wait_writer();
  } catch (...) {
    if (writer.joinable()) writer.join();  // it may still be using fd
    if (open_fd) {
      ::close(fd);
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    throw;
  }
  if (durable_writes() && ::fsync(fd) != 0) fail("fsync failed", errno);
  if (::close(fd) != 0) {
    int e = errno;
    std::error_code ec;
    fs::remove(tmp, ec);
    user_error("{}: close failed: {}", path, std::strerror(e));
  }
  return tmp;
}

void rename_into_place(const fs::path& tmp, const std::string& path) {
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    user_error("{}: cannot rename into place: {}", path, ec.message());
  }
}

}  // namespace

std::string safetensors_header(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                               std::vector<size_t>* order) {
  std::vector<size_t> tmp;
  return build_header(tensors, metadata, order ? order : &tmp, "safetensors header");
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  rename_into_place(write_temp(path, tensors, metadata), path);
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints (huggingface_hub serialization/_base.py, transformers save_pretrained)

namespace {
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

bool is_shard_name(const std::string& f) {
  // model-DDDDD-of-DDDDD.safetensors
  if (f.size() != 32 || f.rfind("model-", 0) != 0 || f.substr(11, 4) != "-of-" || f.substr(20) != ".safetensors")
    return false;
  for (size_t i : {6, 7, 8, 9, 10, 15, 16, 17, 18, 19})
    if (f[i] < '0' || f[i] > '9') return false;
  return true;
}
}  // namespace

SafetensorsDir load_safetensors_dir(const std::string& dir) {
  SafetensorsDir out;
  fs::path d(dir);
  fs::path index = d / kIndexName;
  std::error_code ec;
  if (!fs::is_directory(d, ec)) user_error("{}: not a folder", dir);

  if (!fs::exists(index, ec)) {
    fs::path single = d / kSingleName;
    if (!fs::exists(single, ec)) {
      std::vector<fs::path> found;
      for (auto& de : fs::directory_iterator(d, ec))
        if (de.path().extension() == ".safetensors") found.push_back(de.path());
      if (found.size() != 1)
        user_error("{}: no {} or {} ({} other .safetensors files)", dir, kSingleName, kIndexName, found.size());
      single = found[0];
    }
    out.files.push_back(SafetensorsFile::open(single.string()));
    out.tensors = out.files[0].tensors();
    out.metadata = out.files[0].metadata();
    return out;
  }

  // The index: {"metadata": {...}, "weight_map": {tensor: shard file}}.
  MappedFile m = map_file(index.string());
  json j;
  try {
    j = json::parse(m.data, m.data + m.size);
  } catch (const json::exception& e) {
    user_error("{}: not valid JSON: {}", index.string(), clip(e.what(), 200));
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    user_error("{}: no weight_map object", index.string());
  std::map<std::string, std::vector<std::string>> by_shard;  // shard -> tensors it should hold
  for (auto& [name, v] : j["weight_map"].items()) {
    if (!v.is_string()) user_error("{}: weight_map entry {} is not a string", index.string(), q(name));
    std::string shard = v.get<std::string>();
    // A shard is a file beside the index; refuse paths that would leave the folder.
    if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
        shard == "." || shard == "..")
      user_error("{}: weight_map entry {} names {}, not a file in this folder", index.string(), q(name), q(shard));
    by_shard[shard].push_back(name);
  }
  std::map<std::string, std::string> owner_of;  // tensor -> shard that holds it
  for (auto& [shard, names] : by_shard) {
    fs::path sp = d / shard;
    if (!fs::exists(sp, ec)) user_error("{}: shard {} listed in the index is missing", sp.string(), q(shard));
    SafetensorsFile f = SafetensorsFile::open(sp.string());
    for (auto& n : names)
      if (!f.has(n)) user_error("{}: tensor {} listed in {} is not in this shard", sp.string(), q(n), kIndexName);
    // transformers loads every tensor of every listed shard; one held twice is ambiguous.
    for (auto& [n, t] : f.tensors()) {
      auto [it, fresh] = owner_of.emplace(n, shard);
      if (!fresh) user_error("{}: tensor {} is also in shard {}", sp.string(), q(n), q(it->second));
      out.tensors.emplace(n, t);
    }
    if (out.files.empty()) out.metadata = f.metadata();
    out.files.push_back(std::move(f));
  }
  return out;
}

void write_safetensors_sharded(const std::string& dir, const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata, uint64_t max_shard_bytes) {
  // split_state_dict_into_shards_factory: walk in order; an oversized tensor gets a shard of its
  // own (appended immediately); otherwise start a new shard when this one would overflow.
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> cur;
  uint64_t cur_size = 0, total_size = 0, total_params = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t sz = tensors[i].second.nbytes;
    total_size += sz;
    total_params += uint64_t(std::max<int64_t>(0, tensors[i].second.numel()));
    if (sz > max_shard_bytes) {
      shards.push_back({i});
      continue;
    }
    if (cur_size + sz > max_shard_bytes) {
      shards.push_back(std::move(cur));
      cur.clear();
      cur_size = 0;
    }
    cur.push_back(i);
    cur_size += sz;
  }
  if (!cur.empty() || shards.empty()) shards.push_back(std::move(cur));

  fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) user_error("{}: not a folder", dir);
  const size_t n = shards.size();
  std::vector<std::string> names;
  for (size_t s = 0; s < n; ++s)
    names.push_back(n == 1 ? std::string(kSingleName) : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n));

  // Write every file under a temporary name first; rename only when all succeeded.
  std::vector<std::pair<fs::path, std::string>> written;  // tmp -> final
  try {
    for (size_t s = 0; s < n; ++s) {
      NamedTensors part;
      for (size_t i : shards[s]) part.push_back(tensors[i]);
      std::string final_path = (d / names[s]).string();
      written.emplace_back(write_temp(final_path, part, metadata), final_path);
    }
    if (n > 1) {
      // transformers: {"metadata": {"total_parameters", "total_size"}, "weight_map"},
      // json.dumps(indent=2, sort_keys=True) + "\n" (ensure_ascii).
      json idx;
      idx["metadata"]["total_parameters"] = total_params;
      idx["metadata"]["total_size"] = total_size;
      idx["weight_map"] = json::object();
      for (size_t s = 0; s < n; ++s)
        for (size_t i : shards[s]) idx["weight_map"][tensors[i].first] = names[s];
      std::string text = idx.dump(2, ' ', /*ensure_ascii=*/true) + "\n";
      std::string final_path = (d / kIndexName).string();
      fs::path tmp = d / fmt::format(".{}.tmp-{}-{}", kIndexName, getpid(), g_tmp_counter.fetch_add(1));
      write_file_atomic(tmp.string(), text.data(), text.size());  // complete file at `tmp`
      written.emplace_back(tmp, final_path);
    }
  } catch (...) {
    for (auto& [tmp, final_path] : written) fs::remove(tmp, ec);
    throw;
  }
  for (size_t k = 0; k < written.size(); ++k) {
    try {
      rename_into_place(written[k].first, written[k].second);
    } catch (...) {
      for (size_t r = k + 1; r < written.size(); ++r) fs::remove(written[r].first, ec);
      throw;
    }
  }
  // Remove what a previous save left that would now mislead a reader: a stale index or single
  // file, and shards of another split (transformers deletes those too).
  std::set<std::string> keep(names.begin(), names.end());
  if (n > 1) keep.insert(kIndexName);
  std::vector<fs::path> stale;
  for (auto& de : fs::directory_iterator(d, ec)) {
    std::string f = de.path().filename().string();
    if (!keep.count(f) && (f == kIndexName || f == kSingleName || is_shard_name(f))) stale.push_back(de.path());
  }
  for (auto& p : stale) fs::remove(p, ec);
}

}  // namespace qt
