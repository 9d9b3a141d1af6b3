// Unicode helpers for the template engine. Template strings are UTF-8 (std::string); Python
// semantics (len, indexing, slicing, strip, case mapping) work on code points, so these helpers
// decode/encode. Invalid UTF-8 bytes round-trip through U+DC80..U+DCFF exactly as Python's
// "surrogateescape" does, so no input byte is ever lost.
//
// Character classes follow Python's str methods: is_space is str.isspace (exact); case mapping
// covers ASCII, Latin-1, Latin Extended-A/Additional, Greek, Cyrillic, Armenian and fullwidth
// Latin (other scripts are left unchanged); is_printable is str.isprintable without the table of
// unassigned code points.
#pragma once

#include <string>
#include <string_view>

namespace kvasir::chat::unicode {

std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append(std::string& out, char32_t c);
// Number of code points (what Python's len() reports).
size_t length(std::string_view s);
// Byte offset of code point index `cp` (clamped to s.size()).
size_t byte_offset(std::string_view s, size_t cp);

bool is_space(char32_t c);
bool is_linebreak(
    char32_t c);  // str.splitlines boundaries (\r\n counts as one, handled by callers)
bool is_digit(char32_t c);
bool is_alpha(char32_t c);
inline bool is_alnum(char32_t c) {
  return is_alpha(c) || is_digit(c);
}
bool is_upper(char32_t c);
bool is_lower(char32_t c);
inline bool is_cased(char32_t c) {
  return is_upper(c) || is_lower(c);
}
bool is_printable(char32_t c);
// Appends the upper/lower case mapping of c (may be more than one code point: "ß" -> "SS").
void append_upper(std::u32string& out, char32_t c);
char32_t to_lower(char32_t c);

std::string upper(std::string_view s);
std::string lower(std::string_view s);

}  // namespace kvasir::chat::unicode
