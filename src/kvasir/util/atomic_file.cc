#include "kvasir/util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kvasir/util/error.h"

namespace kvasir {

namespace {
constexpr size_t kBuf = 1 << 20;
}  // namespace

FileSink::FileSink(int fd, const std::string& path) : fd_(fd), path_(path) {
  buf_.reserve(kBuf);
}

void FileSink::put(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  if (buf_.size() + n > kBuf) flush();
  if (n >= kBuf) {
    write_all(b, n);  // big tensors go straight through
  } else if (n > 0) {
    buf_.insert(buf_.end(), b, b + n);
  }
}

void FileSink::flush() {
  write_all(buf_.data(), buf_.size());
  buf_.clear();
}

void FileSink::write_all(const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("{}: write failed: {}", path_, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void write_file_atomically(const std::string& path, const std::function<void(FileSink&)>& emit) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create {}: {}", path, tmp, std::strerror(errno));
  try {
    FileSink sink(fd, path);
    emit(sink);
    sink.flush();
    if (::fsync(fd) != 0) fail("{}: fsync failed: {}", path, std::strerror(errno));
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) fail("{}: close failed: {}", path, std::strerror(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      fail("{}: cannot rename {} to it: {}", path, tmp, std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace kvasir
