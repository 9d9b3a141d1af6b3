// Python's str methods on UTF-8 strings (code point semantics): strip, split, splitlines,
// replace, capitalize, title, swapcase, padding and case predicates, as CPython computes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/chat/value.h"

namespace kvasir::chat {

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
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count);
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
