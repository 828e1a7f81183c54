#include "formats/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "formats/error.h"
#include "formats/mapped_file.h"

namespace qt {

namespace {

// GGUF value type ids (gguf.h GgufValueType).
enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };

template <typename T>
void put(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_str(std::string* s, const std::string& v) {
  put<uint64_t>(s, v.size());
  s->append(v);
}

}  // namespace

void GgufWriter::key(const std::string& k, uint32_t type) {
  if (std::find(keys_.begin(), keys_.end(), k) != keys_.end()) throw std::logic_error("GgufWriter: duplicate key " + k);
  keys_.push_back(k);
  put_str(&kv_, k);
  put<uint32_t>(&kv_, type);
}

void GgufWriter::add_string(const std::string& k, const std::string& v) { key(k, kString), put_str(&kv_, v); }
void GgufWriter::add_u32(const std::string& k, uint32_t v) { key(k, kU32), put(&kv_, v); }
void GgufWriter::add_i32(const std::string& k, int32_t v) { key(k, kI32), put(&kv_, v); }
void GgufWriter::add_f32(const std::string& k, float v) { key(k, kF32), put(&kv_, v); }
void GgufWriter::add_bool(const std::string& k, bool v) { key(k, kBool), put<uint8_t>(&kv_, v ? 1 : 0); }

void GgufWriter::add_string_array(const std::string& k, const std::vector<std::string>& v) {
  key(k, kArray);
  put<uint32_t>(&kv_, kString);
  put<uint64_t>(&kv_, v.size());
  for (auto& s : v) put_str(&kv_, s);
}
void GgufWriter::add_i32_array(const std::string& k, const std::vector<int32_t>& v) {
  key(k, kArray);
  put<uint32_t>(&kv_, kI32);
  put<uint64_t>(&kv_, v.size());
  kv_.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
void GgufWriter::add_f32_array(const std::string& k, const std::vector<float>& v) {
  key(k, kArray);
  put<uint32_t>(&kv_, kF32);
  put<uint64_t>(&kv_, v.size());
  kv_.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                            std::function<std::vector<uint8_t>()> produce) {
  const GgmlTypeRow* row = ggml_type_row(uint32_t(type));
  if (!row || ne.empty() || ne.size() > 4 || ne[0] % row->block_size != 0 || name.size() >= 64)
    throw std::logic_error("GgufWriter: bad tensor " + name);
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  const uint64_t nbytes = uint64_t(n / row->block_size) * uint64_t(row->type_size);
  tensors_.push_back({name, std::move(ne), type, nbytes, std::move(produce)});
}

void GgufWriter::write(const std::string& path) const {
  namespace fs = std::filesystem;
  // Header, metadata, tensor infos (offsets relative to the aligned data section).
  std::string head;
  put<uint32_t>(&head, 0x46554747);  // "GGUF"
  put<uint32_t>(&head, 3);
  put<uint64_t>(&head, tensors_.size());
  put<uint64_t>(&head, keys_.size());
  head += kv_;
  uint64_t offset = 0;
  for (auto& t : tensors_) {
    put_str(&head, t.name);
    put<uint32_t>(&head, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(&head, uint64_t(d));
    put<uint32_t>(&head, uint32_t(t.type));
    put<uint64_t>(&head, offset);
    offset = gguf_pad(offset + t.nbytes, kAlignment);
  }
  head.resize(gguf_pad(head.size(), kAlignment), '\0');

  const fs::path p = fs::absolute(path);
  std::string tmp_name = ".";  // appends: GCC 12 warns (-Wrestrict, falsely) on "." + string
  tmp_name += p.filename().string();
  tmp_name += ".tmp-" + std::to_string(getpid());
  const fs::path tmp = p.parent_path() / tmp_name;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) user_error("{}: cannot create {}: {}", path, tmp.string(), std::strerror(errno));
  std::error_code ec;
  // Cleanup (close, remove the temporary) is the catch block's, for every error alike.
  auto fail = [&](int e) { user_error("{}: write failed: {}", path, std::strerror(e)); };
  try {
    if (int e = write_all(fd, head.data(), head.size())) fail(e);
    static const char zeros[kAlignment] = {};
    for (auto& t : tensors_) {
      std::vector<uint8_t> bytes = t.produce();
      if (bytes.size() != t.nbytes)
        throw std::logic_error("GgufWriter: " + t.name + " produced " + std::to_string(bytes.size()) +
                               " bytes, expected " + std::to_string(t.nbytes));
      if (int e = write_all(fd, bytes.data(), bytes.size())) fail(e);
      const size_t pad = size_t(gguf_pad(t.nbytes, kAlignment) - t.nbytes);
      if (int e = write_all(fd, zeros, pad)) fail(e);
    }
    if (durable_writes() && ::fsync(fd) != 0 && errno != EINVAL) fail(errno);
  } catch (...) {
    ::close(fd);
    fs::remove(tmp, ec);
    throw;
  }
  ::close(fd);
  fs::rename(tmp, p, ec);
  if (ec) {
    std::error_code ec2;
    fs::remove(tmp, ec2);
    user_error("{}: cannot rename into place: {}", path, ec.message());
  }
}

}  // namespace qt
