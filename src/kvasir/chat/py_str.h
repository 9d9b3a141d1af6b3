// Python's str methods on UTF-8 strings (code point semantics): strip, split, splitlines,
// replace, capitalize, title, swapcase, padding and case predicates, as CPython computes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvasir/chat/value.h"

namespace kvasir::chat {

// Substring search that stays linear whatever the input: std::string::find is O(n*m) for
// inputs like "aa...ab" in "aa...a", which a template can build (and libstdc++'s
// std::boyer_moore_searcher spends O(m^2) building its tables for such a needle). Forward search
// is glibc's memmem (Two-Way: linear time, constant space); backward search is Knuth-Morris-Pratt
// over the reversed strings (linear time, one table of the needle's length).
class Searcher {
 public:
  explicit Searcher(std::string_view needle);
  Searcher(const Searcher&) = delete;
  Searcher& operator=(const Searcher&) = delete;
  // First occurrence at or after `from`; npos when absent.
  size_t find(std::string_view hay, size_t from = 0) const;
  // Start of the last occurrence lying entirely inside hay; npos when absent.
  size_t rfind(std::string_view hay) const;

 private:
  std::string_view needle_;
  // KMP failure function of the reversed needle, built on the first rfind of a long needle.
  mutable std::vector<size_t> back_fail_;
};
inline size_t py_find(std::string_view hay, std::string_view needle, size_t from = 0) {
  return Searcher(needle).find(hay, from);
}
inline size_t py_rfind(std::string_view hay, std::string_view needle) {
  return Searcher(needle).rfind(hay);
}

// str.strip/lstrip/rstrip(chars); chars None or absent: whitespace.
std::string py_strip(const std::string& s, const std::optional<Value>& chars, bool left,
                     bool right);
// str.split() / str.rsplit() without a separator (runs of whitespace).
std::vector<std::string> py_split_ws(const std::string& s, int64_t maxsplit);
std::vector<std::string> py_rsplit_ws(const std::string& s, int64_t maxsplit);
// str.split(sep) / str.rsplit(sep); ValueError for an empty separator.
std::vector<std::string> py_split(const std::string& s, const std::string& sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(const std::string& s, const std::string& sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
// Fails with a Limit error, before building it, when the result would exceed max_size bytes.
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count, size_t max_size);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);
std::string py_swapcase(const std::string& s);
// str.center/ljust/rjust (align '^', '<', '>') with a one-character fill.
std::string py_pad(const std::string& s, int64_t width, char align, const std::string& fill);
// Non-empty and every character satisfies pred (str.isdigit etc.).
bool str_pred(const std::string& s, bool (*pred)(char32_t));
// str.islower (want_upper false) / str.isupper: some cased character, none of the other case.
bool str_has_cased(const std::u32string& u, bool want_upper);

}  // namespace kvasir::chat
