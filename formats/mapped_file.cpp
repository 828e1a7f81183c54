#include "formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "formats/error.h"

namespace qt {

namespace {
struct Mapping {
  void* addr = nullptr;
  size_t len = 0;
  ~Mapping() {
    if (addr && len) munmap(addr, len);
  }
};
}  // namespace

MappedFile map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) user_error("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    user_error("{}: not a regular file", path);
  }
  MappedFile mf;
  mf.size = size_t(st.st_size);
  auto m = std::make_shared<Mapping>();
  if (mf.size > 0) {
    void* p = mmap(nullptr, mf.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      user_error("{}: cannot map: {}", path, std::strerror(errno));
    }
    m->addr = p;
    m->len = mf.size;
    mf.data = static_cast<const uint8_t*>(p);
  } else {
    static const uint8_t kEmpty = 0;
    mf.data = &kEmpty;
  }
  ::close(fd);
  mf.owner = m;
  return mf;
}

int write_all(int fd, const void* bytes, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(bytes);
  for (size_t done = 0; done < n;) {
    ssize_t w = ::write(fd, b + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    done += size_t(w);
  }
  return 0;
}

void write_file_atomic(const std::string& path, const void* bytes, size_t n) {
  namespace fs = std::filesystem;
  fs::path p(path);
  // Not a file to replace (/dev/stdout, a pipe): write straight into it. Renaming a temporary
  // over it would replace the device node or the symlink.
  std::error_code sec;
  const auto st = fs::status(p, sec);
  if (!sec && fs::exists(st) && !fs::is_regular_file(st)) {
    if (fs::is_directory(st)) user_error("{}: is a folder, not a file", path);
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) user_error("{}: cannot open: {}", path, std::strerror(errno));
    const int e = write_all(fd, bytes, n);
    ::close(fd);
    if (e) user_error("{}: write failed: {}", path, std::strerror(e));
    return;
  }
  std::string name = ".";  // built up by appends: GCC 12 gives a false -Wrestrict for "." + string
  name += p.filename().string();
  name += ".tmp-" + std::to_string(getpid());
  fs::path tmp = p.parent_path() / name;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) user_error("{}: cannot create: {}", tmp.string(), std::strerror(errno));
  if (const int e = write_all(fd, bytes, n)) {
    ::close(fd);
    fs::remove(tmp);
    user_error("{}: write failed: {}", path, std::strerror(e));
  }
  if (durable_writes()) ::fsync(fd);
  ::close(fd);
  std::error_code ec;
  fs::rename(tmp, p, ec);
  if (ec) {
    fs::remove(tmp);
    user_error("{}: cannot rename into place: {}", path, ec.message());
  }
}

namespace {
std::atomic<bool> g_durable{false};
}
void set_durable_writes(bool on) { g_durable = on; }
bool durable_writes() { return g_durable; }

}  // namespace qt
