// Read-only memory-mapped file. The mapping lives as long as the object; views into it
// (GGUF tensors) are zero-copy. Errors name the path and the failing system call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvasir {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvasir
