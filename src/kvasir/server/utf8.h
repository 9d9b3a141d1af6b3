// UTF-8 validation for request bodies (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace kvasir::server {

// The offset of the first byte that starts an ill-formed sequence, or nullopt if `s` is valid.
std::optional<size_t> find_invalid_utf8(std::string_view s);

}  // namespace kvasir::server
