#include "kvasir/util/sha256.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "kvasir/util/error.h"

namespace kvasir {

namespace {

constexpr size_t kChunk = size_t{4} << 20;

// One EVP digest context, freed on every path out.
class Sha256 {
 public:
  explicit Sha256(std::string_view what) : what_(what), ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      fail("{}: cannot start a SHA-256 digest (OpenSSL)", what_);
  }
  void update(const void* data, size_t n) {
    if (n > 0 && EVP_DigestUpdate(ctx_.get(), data, n) != 1)
      fail("{}: SHA-256 update failed (OpenSSL)", what_);
  }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), md, &len) != 1 || len != 32)
      fail("{}: SHA-256 final failed (OpenSSL)", what_);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out(64, '0');
    for (unsigned i = 0; i < 32; ++i) {
      out[2 * i] = kHex[md[i] >> 4];
      out[2 * i + 1] = kHex[md[i] & 15];
    }
    return out;
  }

 private:
  struct Free {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::string what_;
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

bool counts_in_folder_digest(const std::string& name) {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (name.empty() || name[0] == '.') return false;
  return ends_with(".safetensors") || ends_with(".json") || ends_with(".jinja") ||
         name == "tokenizer.model";
}

std::string folder_digest(const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(folder, ec), end;
  if (ec) fail("{}: cannot list the folder: {}", folder.string(), ec.message());
  for (; it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!counts_in_folder_digest(name)) continue;
    std::error_code ec2;
    if (!fs::is_regular_file(it->path(), ec2)) continue;  // follows symbolic links
    if (name.find_first_of("\n\\") != std::string::npos)
      fail("{}: file name holds a newline or a backslash (not digestible as sha256sum lines)",
           it->path().string());
    names.push_back(name);
  }
  if (ec) fail("{}: cannot list the folder: {}", folder.string(), ec.message());
  if (names.empty())
    fail(
        "{}: no model files to hash (expected *.safetensors, *.json, *.jinja or "
        "tokenizer.model)",
        folder.string());
  std::sort(names.begin(), names.end());  // byte order, as LC_ALL=C sort
  std::string manifest;
  for (const std::string& name : names)
    manifest += sha256_file((folder / name).string()) + "  " + name + "\n";
  return sha256_hex(manifest);
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  Sha256 h("sha256");
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("{}: is a folder, expected a file", path);
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) fail("{}: cannot open for hashing: {}", path, std::strerror(errno));
  Sha256 h(path);
  std::vector<unsigned char> buf(kChunk);
  for (;;) {
    const size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    h.update(buf.data(), n);
    if (n < buf.size()) {
      if (std::ferror(f.get())) fail("{}: read error while hashing", path);
      break;
    }
  }
  return h.hex();
}

std::string sha256_model_path(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) fail("{}: no such file or folder", path);
  if (std::filesystem::is_directory(st)) return folder_digest(path);
  return sha256_file(path);
}

bool is_sha256_hex(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
         });
}

}  // namespace kvasir
