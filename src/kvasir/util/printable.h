// printable(s): a name taken from an input file (which may hold any bytes) made safe to quote in
// an error message: control bytes, DEL, quotes and backslashes as \xNN, at most 96 bytes then
// "...". Used by the GGUF and safetensors readers.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>

namespace kvasir {

inline std::string printable(std::string_view s) {
  std::string out;
  const size_t n = std::min<size_t>(s.size(), 96);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (n < s.size()) out += "...";
  return out;
}

}  // namespace kvasir
