#include "kvasir/server/api_keys.h"

#include <fmt/format.h>

#include <cctype>
#include <fstream>

#include "kvasir/util/error.h"

namespace kvasir::server {

namespace {

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

bool equal_constant_time(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) {
    const unsigned char cb = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(static_cast<unsigned char>(a[i]) ^ cb);
  }
  return diff == 0;
}

}  // namespace

ApiKeys::ApiKeys(std::vector<std::string> keys) {
  for (auto& k : keys) {
    std::string_view t = trim(k);
    if (!t.empty()) keys_.emplace_back(t);
  }
}

void ApiKeys::add(std::string_view key) {
  std::string_view t = trim(key);
  if (t.empty()) fail("an API key must not be empty");
  keys_.emplace_back(t);
}

ApiKeys ApiKeys::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot read the API key file", path);
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    std::string_view t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    keys.emplace_back(t);
  }
  if (keys.empty()) fail("{}: the API key file holds no key (one key per line)", path);
  return ApiKeys(std::move(keys));
}

std::optional<std::string> ApiKeys::check(std::string_view authorization) const {
  if (keys_.empty()) return std::string("none");
  std::string_view v = trim(authorization);
  constexpr std::string_view kBearer = "Bearer ";
  if (v.size() <= kBearer.size()) return std::nullopt;
  for (size_t i = 0; i < kBearer.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(v[i])) !=
        std::tolower(static_cast<unsigned char>(kBearer[i])))
      return std::nullopt;
  std::string_view token = trim(v.substr(kBearer.size()));
  std::optional<std::string> found;
  for (size_t i = 0; i < keys_.size(); ++i)  // no early exit: time does not reveal which key
    if (equal_constant_time(keys_[i], token) && !found) found = fmt::format("key{}", i + 1);
  return found;
}

}  // namespace kvasir::server
