// Error type used at the edges (load, parse, HTTP). Messages say what was wrong and where:
// which file, which field, what was expected. The hot path never throws.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kvasir {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws kvasir::Error with a fmt-style message: fail("{}: tensor '{}' out of bounds", path, name).
template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvasir
