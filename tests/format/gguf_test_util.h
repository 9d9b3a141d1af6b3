// Helpers for the GGUF tests: a byte builder for hand-made (often malformed) images and a scratch
// directory. Test-data paths are in test_util/paths.h.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::gguf::testing {

// Little-endian GGUF bytes, field by field.
struct Bytes {
  std::vector<uint8_t> b;

  template <class T>
  Bytes& put(T x) {
    size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &x, sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t x) { return put(x); }
  Bytes& u32(uint32_t x) { return put(x); }
  Bytes& u64(uint64_t x) { return put(x); }
  Bytes& i64(int64_t x) { return put(x); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  // A key with a uint32 value (type 4).
  Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  Bytes& tensor(std::string_view name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) i64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t alignment) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
  size_t size() const { return b.size(); }
};

// A fresh empty directory under the system temp dir, removed by the destructor.
class ScratchDir {
 public:
  ScratchDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("kvasir_format_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(std::string_view name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvasir::gguf::testing
