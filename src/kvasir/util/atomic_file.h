// Writing a file atomically: the bytes go to "<path>.tmp" through a buffered FileSink, which is
// fsync'ed, closed and renamed over `path`, so a reader never sees a half-written file and a failed
// write leaves nothing behind (the temp file is removed). Errors name the final path and the
// failing call. Used by the GGUF and safetensors writers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvasir {

// Buffered writes to a file descriptor (1 MiB buffer; larger pieces go straight through).
class FileSink {
 public:
  FileSink(int fd, const std::string& path);
  void put(const void* p, size_t n);
  void flush();

 private:
  void write_all(const uint8_t* p, size_t n);
  int fd_;
  const std::string& path_;
  std::vector<uint8_t> buf_;
};

// Calls emit(sink) and publishes the result at `path`; throws kvasir::Error on any failure.
void write_file_atomically(const std::string& path, const std::function<void(FileSink&)>& emit);

}  // namespace kvasir
