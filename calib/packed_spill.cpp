#include "calib/packed_spill.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "formats/error.h"

namespace qt::calib {

PackedSpill::PackedSpill(const std::string& dir) : dir_(dir) {
  if (dir_.empty()) {
    const char* t = std::getenv("TMPDIR");
    dir_ = t && *t ? t : "/tmp";
  }
  fd_ = ::open(dir_.c_str(), O_TMPFILE | O_RDWR, 0600);
  if (fd_ < 0) {  // file systems without O_TMPFILE: a named file, unlinked at once
    std::string tmpl = dir_ + "/quanttool-gptq-XXXXXX";
    fd_ = ::mkstemp(tmpl.data());
    if (fd_ >= 0) ::unlink(tmpl.c_str());
  }
  if (fd_ < 0)
    user_error("gptq: cannot make a temporary file in {} for the quantized blocks: {}", dir_, std::strerror(errno));
}

PackedSpill::~PackedSpill() {
  if (fd_ >= 0) ::close(fd_);  // the mappings keep what they map
}

Tensor PackedSpill::spill(const Tensor& t) {
  if (!t.data || t.nbytes == 0) return t;
  const int64_t page = ::sysconf(_SC_PAGESIZE), off = end_;
  for (size_t done = 0; done < t.nbytes;) {
    const ssize_t w = ::pwrite(fd_, t.data + done, t.nbytes - done, off_t(off + int64_t(done)));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      user_error("gptq: writing the quantized blocks to a temporary file in {} failed: {}", dir_,
                 w < 0 ? std::strerror(errno) : "no progress");
    done += size_t(w);
  }
  end_ = (off + int64_t(t.nbytes) + page - 1) / page * page;
  void* m = ::mmap(nullptr, t.nbytes, PROT_READ, MAP_SHARED, fd_, off_t(off));
  if (m == MAP_FAILED) user_error("gptq: mapping the temporary file in {} failed: {}", dir_, std::strerror(errno));
  Tensor r = t;
  r.data = static_cast<const uint8_t*>(m);
  const size_t n = t.nbytes;
  r.owner = std::shared_ptr<const void>(m, [n](const void* p) { ::munmap(const_cast<void*>(p), n); });
  r.mapped = true;
  return r;
}

PackedTensor PackedSpill::keep(const PackedTensor& p) {
  PackedTensor r = p;
  r.data = spill(p.data);
  r.scales = spill(p.scales);
  r.biases = spill(p.biases);
  return r;
}

}  // namespace qt::calib
