#include "kvasir/chat/unicode.h"

namespace kvasir::chat::unicode {

namespace {

constexpr char32_t kEscapeBase = 0xDC80;  // surrogateescape: byte b <-> U+DC00 + b (b >= 0x80)

// Decodes one code point at s[i]; advances i. Invalid sequences yield one escaped byte.
char32_t next(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  int len = 0;
  char32_t cp = 0;
  if ((b & 0xE0) == 0xC0) {
    len = 2;
    cp = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    len = 3;
    cp = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    len = 4;
    cp = b & 0x07;
  }
  if (len == 0 || i + len > s.size()) {
    ++i;
    return kEscapeBase - 0x80 + b;
  }
  for (int k = 1; k < len; ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) {
      ++i;
      return kEscapeBase - 0x80 + b;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  // Reject overlong forms, surrogates and out-of-range values.
  static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return kEscapeBase - 0x80 + b;
  }
  i += len;
  return cp;
}

struct Range {
  char32_t lo, hi;
};

template <size_t N>
bool in_ranges(const Range (&ranges)[N], char32_t c) {
  for (const Range& r : ranges)
    if (c >= r.lo && c <= r.hi) return true;
  return false;
}

// Upper-case letter -> lower-case letter; 0 when c is not an upper-case letter we know.
char32_t upper_to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return 0;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';
    if (c == 0x178) return 0xFF;
    if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
      return (c % 2 == 0) ? c + 1 : 0;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : 0;
    return 0;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F))
    return (c % 2 == 0) ? c + 1 : 0;
  if (c >= 0x531 && c <= 0x556) return c + 48;
  if ((c >= 0x1E00 && c <= 0x1E95) || (c >= 0x1EA0 && c <= 0x1EFF)) return (c % 2 == 0) ? c + 1 : 0;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return 0;
}

// Lower-case letter -> upper-case letter; 0 when c is not a lower-case letter we know.
char32_t lower_to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return 0;
  if (c == 0xB5) return 0x39C;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
      return (c % 2 == 1) ? c - 1 : 0;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : 0;
    return 0;
  }
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3C9) return c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F))
    return (c % 2 == 1) ? c - 1 : 0;
  if (c >= 0x561 && c <= 0x586) return c - 48;
  if ((c >= 0x1E00 && c <= 0x1E95) || (c >= 0x1EA0 && c <= 0x1EFF)) return (c % 2 == 1) ? c - 1 : 0;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return 0;
}

}  // namespace

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next(s, i));
  return out;
}

void append(std::string& out, char32_t c) {
  if (c >= 0xDC80 && c <= 0xDCFF) {  // an escaped raw byte
    out.push_back(static_cast<char>(c - 0xDC00));
  } else if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append(out, c);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
    } else {
      next(s, i);
    }
  }
  return n;
}

size_t byte_offset(std::string_view s, size_t cp) {
  size_t i = 0;
  for (size_t n = 0; n < cp && i < s.size(); ++n) next(s, i);
  return i;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_linebreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

bool is_digit(char32_t c) {
  static constexpr Range kDigits[] = {{'0', '9'},       {0x660, 0x669},    {0x6F0, 0x6F9},
                                      {0x966, 0x96F},   {0x9E6, 0x9EF},    {0xE50, 0xE59},
                                      {0xFF10, 0xFF19}, {0x1D7CE, 0x1D7FF}};
  return in_ranges(kDigits, c);
}

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (is_cased(c)) return true;
  // Letters of uncased scripts: an approximation by blocks, excluding punctuation and symbols.
  static constexpr Range kNotLetters[] = {
      {0x80, 0xA9},     {0xAB, 0xB4},     {0xB6, 0xB9},     {0xBB, 0xBF},
      {0xD7, 0xD7},     {0xF7, 0xF7},     {0x2000, 0x2BFF}, {0x3000, 0x3004},
      {0x3008, 0x3020}, {0x3030, 0x3030}, {0xFE30, 0xFE4F}, {0xFF00, 0xFF20},
      {0xFF3B, 0xFF40}, {0xFF5B, 0xFF65}, {0xD800, 0xF8FF}, {0x1F000, 0x1FAFF}};
  if (in_ranges(kNotLetters, c) || is_space(c) || is_digit(c)) return false;
  return c >= 0xAA;
}

bool is_upper(char32_t c) {
  return upper_to_lower(c) != 0;
}
bool is_lower(char32_t c) {
  return lower_to_upper(c) != 0 || c == 0xDF;
}

bool is_printable(char32_t c) {
  static constexpr Range kUnprintable[] = {
      {0x00, 0x1F},       {0x7F, 0xA0},       {0xAD, 0xAD},       {0x600, 0x605},
      {0x61C, 0x61C},     {0x6DD, 0x6DD},     {0x70F, 0x70F},     {0x8E2, 0x8E2},
      {0x1680, 0x1680},   {0x180E, 0x180E},   {0x2000, 0x200F},   {0x2028, 0x202F},
      {0x205F, 0x2064},   {0x2066, 0x206F},   {0x3000, 0x3000},   {0xD800, 0xF8FF},
      {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},   {0x110BD, 0x110BD}, {0x1BCA0, 0x1BCA3},
      {0x1D173, 0x1D17A}, {0xE0001, 0xE0001}, {0xE0020, 0xE007F}, {0xF0000, 0x10FFFF}};
  return !in_ranges(kUnprintable, c);
}

void append_upper(std::u32string& out, char32_t c) {
  if (c == 0xDF) {  // sharp s
    out += U"SS";
    return;
  }
  char32_t u = lower_to_upper(c);
  out.push_back(u ? u : c);
}

char32_t to_lower(char32_t c) {
  char32_t l = upper_to_lower(c);
  return l ? l : c;
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::u32string tmp;
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'a' && b <= 'z' ? b - 32 : b));
      ++i;
      continue;
    }
    tmp.clear();
    append_upper(tmp, next(s, i));
    for (char32_t c : tmp) append(out, c);
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
      ++i;
      continue;
    }
    append(out, to_lower(next(s, i)));
  }
  return out;
}

}  // namespace kvasir::chat::unicode
