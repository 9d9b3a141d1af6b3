// ApiKeys: the bearer tokens a server accepts, loaded from a key file.
//
// Key file: one key per line; leading/trailing white space is trimmed; blank lines and lines
// starting with '#' are ignored. An empty set means auth is off. check() takes the value of the
// Authorization header and returns the key's label, or nullopt when it is missing or wrong. A
// label identifies a key in metrics and logs without revealing it: "key<N>", N being the key's
// 1-based position among the file's keys ("none" when auth is off). Comparison of secrets takes
// time independent of where they differ.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::server {

class ApiKeys {
 public:
  ApiKeys() = default;
  explicit ApiKeys(std::vector<std::string> keys);
  // Throws kvasir::Error naming the file if it cannot be read or holds no key.
  static ApiKeys load(const std::string& path);
  // Accepts one more key (surrounding whitespace trimmed); its label follows the others'.
  // Throws kvasir::Error when it is empty.
  void add(std::string_view key);

  bool enabled() const { return !keys_.empty(); }
  size_t size() const { return keys_.size(); }
  // `authorization` is the header value, e.g. "Bearer sk-...".
  std::optional<std::string> check(std::string_view authorization) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace kvasir::server
